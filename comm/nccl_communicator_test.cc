// The NCCL backend on real GPUs. Without a CUDA device (as on the build
// machines) every test that needs one skips with a message; the argument
// checks and the no-device error run everywhere.
//
// With one GPU: a world of 1 through a FileStore. With two or more: ranks as
// threads of this process, rank r on device r, world = min(#GPUs, 4).

#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo_test_world.h"
#include "comm/traffic_accounting.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::AllOk;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;

constexpr absl::Duration kConnectTimeout = absl::Seconds(60);
constexpr int kMaxWorld = 4;

// The number of CUDA devices; 0 with `why` set when there are none or the
// runtime cannot tell (no driver).
int CudaDevices(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    *why = absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorString(error));
    return 0;
  }
  if (count == 0) *why = "cudaGetDeviceCount returned 0";
  return count;
}

int DeviceCount() {
  std::string why;
  return CudaDevices(&why);
}

// Empty if at least `min_devices` CUDA devices are present, else why not.
std::string SkipReason(int min_devices) {
  std::string why;
  const int count = CudaDevices(&why);
  if (count >= min_devices) return "";
  return absl::StrCat("needs ", min_devices, " CUDA device(s), found ", count, why.empty() ? "" : " (" + why + ")");
}

#define SKIP_UNLESS_GPUS(min_devices)                          \
  do {                                                         \
    const std::string skip_reason = SkipReason(min_devices);   \
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;     \
  } while (false)

#define ASSERT_OK(expr)                 \
  do {                                  \
    const absl::Status s_ = (expr);     \
    ASSERT_TRUE(s_.ok()) << s_;         \
  } while (false)

#define EXPECT_OK(expr)                 \
  do {                                  \
    const absl::Status s_ = (expr);     \
    EXPECT_TRUE(s_.ok()) << s_;         \
  } while (false)

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// n floats of device memory on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }

  absl::Status Init(size_t n) {
    n_ = n;
    if (n == 0) return absl::OkStatus();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, n * sizeof(float));
    if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaMalloc: ", cudaGetErrorString(e)));
    ptr_ = static_cast<float*>(p);
    return absl::OkStatus();
  }
  absl::Status Init(const std::vector<float>& host) {
    absl::Status s = Init(host.size());
    if (!s.ok() || host.empty()) return s;
    return Check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "H2D");
  }
  absl::StatusOr<std::vector<float>> ToHost() const {
    std::vector<float> host(n_);
    if (n_ == 0) return host;
    absl::Status s = Check(cudaMemcpy(host.data(), ptr_, n_ * sizeof(float), cudaMemcpyDeviceToHost), "D2H");
    if (!s.ok()) return s;
    return host;
  }
  absl::Span<float> span() { return absl::MakeSpan(ptr_, n_); }
  absl::Span<const float> const_span() const { return absl::MakeConstSpan(ptr_, n_); }

 private:
  static absl::Status Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cudaMemcpy ", what, ": ", cudaGetErrorString(e)));
  }
  float* ptr_ = nullptr;
  size_t n_ = 0;
};

// Element-wise equality (the values are integers, so exact).
absl::Status ExpectEqual(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return absl::InternalError(absl::StrCat(what, ": size ", got.size(), ", expected ", want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", got[i], ", expected ", want[i]));
    }
  }
  return absl::OkStatus();
}

// The buffer's contents, copied back, equal `want`.
absl::Status ExpectDevice(const std::string& what, const DeviceBuffer& buffer, const std::vector<float>& want) {
  absl::StatusOr<std::vector<float>> got = buffer.ToHost();
  if (!got.ok()) return got.status();
  return ExpectEqual(what, *got, want);
}

#define RETURN_IF_NOT_OK(expr)        \
  do {                                \
    const absl::Status s_ = (expr);   \
    if (!s_.ok()) return s_;          \
  } while (false)

absl::Status SetDevice(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaSetDevice: ", cudaGetErrorString(e)));
  return absl::OkStatus();
}

// Connects `world` ranks as threads, rank r on device r.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> ConnectNcclWorld(const std::string& label, int world) {
  const RendezvousSpec spec = LocalFileSpec(label);
  std::vector<std::unique_ptr<Communicator>> comms(world);
  const absl::Status status = AllOk(RunOnRanks(world, [&](int r) -> absl::Status {
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        ConnectNccl(spec, r, world, /*device=*/r, WorkerIdentity{"test", "plan", world}, kConnectTimeout);
    if (!c.ok()) return c.status();
    comms[r] = std::move(*c);
    return absl::OkStatus();
  }));
  if (!status.ok()) return status;
  return comms;
}

CollectiveOptions Tag(uint32_t tag, absl::Duration timeout = absl::Seconds(60)) {
  CollectiveOptions options;
  options.tag = tag;
  options.timeout = timeout;
  return options;
}

// --- Runs everywhere ---------------------------------------------------------

TEST(NcclConnectTest, RejectsBadArguments) {
  const RendezvousSpec spec = LocalFileSpec("nccl-args");
  const WorkerIdentity identity{"test", "plan", 2};
  EXPECT_EQ(ConnectNccl(spec, 2, 2, 0, identity, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectNccl(spec, 0, 0, 0, identity, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectNccl(spec, 0, 2, -1, identity, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectNccl(spec, 0, 2, 0, identity, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Without a device ConnectNccl fails at once, before the rendezvous.
TEST(NcclConnectTest, NoDeviceIsFailedPrecondition) {
  std::string why;
  if (CudaDevices(&why) > 0) GTEST_SKIP() << "a CUDA device is present; this test is for machines without one";
  const absl::Time start = absl::Now();
  const absl::Status status =
      ConnectNccl(LocalFileSpec("nccl-nodevice"), 0, 2, 0, WorkerIdentity{"test", "plan", 2}, absl::Seconds(30))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(Contains(status, "ConnectNccl")) << status;
  EXPECT_TRUE(Contains(status, "CUDA device")) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// --- One GPU: world 1 ----------------------------------------------------------

TEST(NcclCommunicatorTest, WorldOfOne) {
  SKIP_UNLESS_GPUS(1);
  absl::StatusOr<std::unique_ptr<Communicator>> c =
      ConnectNccl(LocalFileSpec("nccl-world1"), 0, 1, 0, WorkerIdentity{"test", "plan", 1}, kConnectTimeout);
  ASSERT_TRUE(c.ok()) << c.status();
  Communicator& comm = **c;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world(), 1);
  EXPECT_EQ(comm.backend(), "nccl");
  ASSERT_OK(SetDevice(0));

  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{65539}}) {
    SCOPED_TRACE(n);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) - 500.0f;

    DeviceBuffer data;
    ASSERT_OK(data.Init(host));
    ASSERT_OK(comm.AllReduce(data.span(), ReduceOp::kSum, Tag(1)));
    EXPECT_OK(ExpectDevice("allreduce", data, host));
    ASSERT_OK(comm.AllReduce(data.span(), ReduceOp::kAvg, Tag(2)));
    EXPECT_OK(ExpectDevice("allreduce avg", data, host));

    ASSERT_OK(comm.Broadcast(data.span(), 0, Tag(3)));
    EXPECT_OK(ExpectDevice("broadcast", data, host));

    DeviceBuffer gathered;
    ASSERT_OK(gathered.Init(n));
    ASSERT_OK(comm.AllGather(data.const_span(), gathered.span(), Tag(4)));
    EXPECT_OK(ExpectDevice("allgather", gathered, host));

    DeviceBuffer scattered;
    ASSERT_OK(scattered.Init(n));
    ASSERT_OK(comm.ReduceScatter(data.const_span(), scattered.span(), ReduceOp::kSum, Tag(5)));
    EXPECT_OK(ExpectDevice("reduce_scatter", scattered, host));
  }
  EXPECT_OK(comm.Barrier(Tag(6)));

  // Zero elements: OK, nothing launched.
  EXPECT_OK(comm.AllReduce(absl::Span<float>(), ReduceOp::kSum, Tag(7)));
  EXPECT_OK(comm.AllGather(absl::Span<const float>(), absl::Span<float>(), Tag(8)));

  // World 1 moves no bytes by the formulas.
  const TrafficCounters traffic = comm.traffic();
  EXPECT_EQ(traffic.bytes_sent, 0);
  EXPECT_EQ(traffic.bytes_received, 0);
  EXPECT_EQ(traffic.calls, 4 * 5 + 1 + 2);

  // Host memory and bad arguments are refused and leave the communicator usable.
  std::vector<float> host_data(4, 1.0f);
  const absl::Status host = comm.AllReduce(absl::MakeSpan(host_data), ReduceOp::kSum, Tag(9));
  EXPECT_EQ(host.code(), absl::StatusCode::kInvalidArgument) << host;
  EXPECT_TRUE(Contains(host, "host memory")) << host;
  DeviceBuffer small;
  ASSERT_OK(small.Init(4));
  EXPECT_EQ(comm.Broadcast(small.span(), 1, Tag(10)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Send(small.const_span(), 0, Tag(11)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_OK(comm.AllReduce(small.span(), ReduceOp::kSum, Tag(12)));
}

// A rank that never joins: DeadlineExceeded within about the timeout.
TEST(NcclCommunicatorTest, ConnectTimesOutWithoutPeers) {
  SKIP_UNLESS_GPUS(1);
  const absl::Time start = absl::Now();
  const absl::Status status =
      ConnectNccl(LocalFileSpec("nccl-alone"), 0, 2, 0, WorkerIdentity{"test", "plan", 2}, absl::Seconds(1))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(Contains(status, "rank 1")) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// --- Two or more GPUs ------------------------------------------------------------

TEST(NcclCommunicatorTest, CollectivesAcrossGpus) {
  SKIP_UNLESS_GPUS(2);
  const int world = std::min(DeviceCount(), kMaxWorld);
  auto comms = ConnectNcclWorld("nccl-collectives", world);
  ASSERT_TRUE(comms.ok()) << comms.status();
  const float nf = static_cast<float>(world);

  for (size_t n : {size_t{1}, size_t{1000}, size_t{65539}}) {
    SCOPED_TRACE(n);
    const absl::Status status = AllOk(RunOnRanks(world, [&](int r) -> absl::Status {
      RETURN_IF_NOT_OK(SetDevice(r));
      Communicator& comm = *(*comms)[r];
      const TrafficCounters before = comm.traffic();

      // AllReduce sum: rank r holds r*1000 + (i % 977).
      std::vector<float> mine(n), want(n);
      for (size_t i = 0; i < n; ++i) {
        mine[i] = static_cast<float>(r * 1000 + static_cast<int>(i % 977));
        want[i] = static_cast<float>(1000 * world * (world - 1) / 2 + world * static_cast<int>(i % 977));
      }
      DeviceBuffer data;
      RETURN_IF_NOT_OK(data.Init(mine));
      RETURN_IF_NOT_OK(comm.AllReduce(data.span(), ReduceOp::kSum, Tag(1)));
      RETURN_IF_NOT_OK(ExpectDevice("allreduce sum", data, want));
      const TrafficCounters after = comm.traffic();
      const TrafficBytes expected = RingAllReduceTraffic(world, static_cast<int64_t>(n * sizeof(float)));
      if (after.bytes_sent - before.bytes_sent != expected.sent ||
          after.bytes_received - before.bytes_received != expected.received || after.calls != before.calls + 1) {
        return absl::InternalError("allreduce traffic differs from the ring formula");
      }

      // AllReduce avg: rank r holds world * (r + i % 5), so the mean is the
      // integer sum over ranks of (r + i % 5) whatever order NCCL divides in.
      for (size_t i = 0; i < n; ++i) {
        mine[i] = nf * static_cast<float>(r + static_cast<int>(i % 5));
        want[i] = static_cast<float>(world * (world - 1) / 2 + world * static_cast<int>(i % 5));
      }
      DeviceBuffer avg;
      RETURN_IF_NOT_OK(avg.Init(mine));
      RETURN_IF_NOT_OK(comm.AllReduce(avg.span(), ReduceOp::kAvg, Tag(2)));
      RETURN_IF_NOT_OK(ExpectDevice("allreduce avg", avg, want));

      // ReduceScatter: input element j of rank r is r + j; chunk c element i
      // sums to world*(c*n + i) + world(world-1)/2.
      std::vector<float> input(n * world);
      for (size_t j = 0; j < input.size(); ++j) input[j] = static_cast<float>(r + static_cast<int>(j % 4096));
      std::vector<float> scattered_want(n);
      for (size_t i = 0; i < n; ++i) {
        const int j = static_cast<int>((static_cast<size_t>(r) * n + i) % 4096);
        scattered_want[i] = static_cast<float>(world * j + world * (world - 1) / 2);
      }
      DeviceBuffer rs_in, rs_out;
      RETURN_IF_NOT_OK(rs_in.Init(input));
      RETURN_IF_NOT_OK(rs_out.Init(n));
      RETURN_IF_NOT_OK(comm.ReduceScatter(rs_in.const_span(), rs_out.span(), ReduceOp::kSum, Tag(3)));
      RETURN_IF_NOT_OK(ExpectDevice("reduce_scatter", rs_out, scattered_want));

      // AllGather: rank r contributes r*100000 + i.
      std::vector<float> block(n), gathered_want(n * world);
      for (size_t i = 0; i < n; ++i) block[i] = static_cast<float>(r * 100000 + static_cast<int>(i));
      for (int q = 0; q < world; ++q) {
        for (size_t i = 0; i < n; ++i) gathered_want[q * n + i] = static_cast<float>(q * 100000 + static_cast<int>(i));
      }
      DeviceBuffer ag_in, ag_out;
      RETURN_IF_NOT_OK(ag_in.Init(block));
      RETURN_IF_NOT_OK(ag_out.Init(n * world));
      RETURN_IF_NOT_OK(comm.AllGather(ag_in.const_span(), ag_out.span(), Tag(4)));
      RETURN_IF_NOT_OK(ExpectDevice("allgather", ag_out, gathered_want));

      // Broadcast from the last rank.
      const int root = world - 1;
      std::vector<float> bc(n), bc_want(n);
      for (size_t i = 0; i < n; ++i) {
        bc_want[i] = static_cast<float>(2 * static_cast<int>(i % 10000));
        bc[i] = r == root ? bc_want[i] : -1.0f;
      }
      DeviceBuffer bc_data;
      RETURN_IF_NOT_OK(bc_data.Init(bc));
      RETURN_IF_NOT_OK(comm.Broadcast(bc_data.span(), root, Tag(5)));
      RETURN_IF_NOT_OK(ExpectDevice("broadcast", bc_data, bc_want));

      // Send/Recv between ranks 0 and 1, each way.
      if (r <= 1) {
        const int peer = 1 - r;
        std::vector<float> out(n), in_want(n);
        for (size_t i = 0; i < n; ++i) {
          out[i] = static_cast<float>(r * 7 + static_cast<int>(i % 1000));
          in_want[i] = static_cast<float>(peer * 7 + static_cast<int>(i % 1000));
        }
        DeviceBuffer send_buf, recv_buf;
        RETURN_IF_NOT_OK(send_buf.Init(out));
        RETURN_IF_NOT_OK(recv_buf.Init(n));
        if (r == 0) {
          RETURN_IF_NOT_OK(comm.Send(send_buf.const_span(), peer, Tag(6)));
          RETURN_IF_NOT_OK(comm.Recv(recv_buf.span(), peer, Tag(7)));
        } else {
          RETURN_IF_NOT_OK(comm.Recv(recv_buf.span(), peer, Tag(6)));
          RETURN_IF_NOT_OK(comm.Send(send_buf.const_span(), peer, Tag(7)));
        }
        RETURN_IF_NOT_OK(ExpectDevice("send/recv", recv_buf, in_want));
      }

      return comm.Barrier(Tag(8));
    }));
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST(NcclCommunicatorTest, BarrierWaitsForEveryRank) {
  SKIP_UNLESS_GPUS(2);
  const int world = std::min(DeviceCount(), kMaxWorld);
  auto comms = ConnectNcclWorld("nccl-barrier", world);
  ASSERT_TRUE(comms.ok()) << comms.status();
  // The last rank arrives 300 ms late; nobody may leave before it arrives.
  const absl::Time start = absl::Now();
  std::vector<absl::Time> left(world);
  const absl::Status status = AllOk(RunOnRanks(world, [&](int r) -> absl::Status {
    if (r == world - 1) absl::SleepFor(absl::Milliseconds(300));
    absl::Status s = (*comms)[r]->Barrier(Tag(1));
    left[r] = absl::Now();
    return s;
  }));
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 0; r < world; ++r) EXPECT_GE(left[r] - start, absl::Milliseconds(290)) << "rank " << r;
}

// One rank never calls: the others end in DeadlineExceeded naming the
// operation, tag and rank within about the timeout, and are unusable after.
TEST(NcclCommunicatorTest, SilentRankTimesOut) {
  SKIP_UNLESS_GPUS(2);
  const int world = std::min(DeviceCount(), kMaxWorld);
  auto comms = ConnectNcclWorld("nccl-timeout", world);
  ASSERT_TRUE(comms.ok()) << comms.status();
  const int silent = world - 1;
  const absl::Duration timeout = absl::Seconds(1);
  std::vector<absl::Duration> took(world);
  const std::vector<absl::Status> statuses = RunOnRanks(world, [&](int r) -> absl::Status {
    if (r == silent) return absl::OkStatus();
    absl::Status s = SetDevice(r);
    if (!s.ok()) return s;
    DeviceBuffer data;
    s = data.Init(std::vector<float>(1024, 1.0f));
    if (!s.ok()) return s;
    const absl::Time start = absl::Now();
    s = (*comms)[r]->AllReduce(data.span(), ReduceOp::kSum, Tag(9, timeout));
    took[r] = absl::Now() - start;
    return s;
  });
  for (int r = 0; r < world; ++r) {
    if (r == silent) continue;
    SCOPED_TRACE(r);
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "allreduce")) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "tag 9")) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], absl::StrCat("rank ", r, " of ", world))) << statuses[r];
    EXPECT_LT(took[r], 2 * timeout + absl::Seconds(1));

    const absl::Status later = (*comms)[r]->Barrier(Tag(10));
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
    EXPECT_TRUE(Contains(later, std::string(statuses[r].message()))) << later;
  }
  // Destroying the communicators (the silent one included) must not hang.
  const absl::Time start = absl::Now();
  comms->clear();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace nereid
