// What only the NCCL backend has: ConnectNccl's argument checks and its error
// without a device, host memory refused, and no transfers to its own rank.
// Without a CUDA device (as on the build machines) the tests that need one
// skip with a message; the argument checks and the no-device error run
// everywhere.
//
// Collectives, point-to-point transfers, the barrier, traffic, the argument
// texts, a silent rank and a rank that never joins are checked for NCCL as
// for every backend in communicator_conformance_test.cc (under --config=cuda,
// one GPU per rank).

#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/gloo_test_world.h"
#include "comm/wire_format.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::LocalFileSpec;

constexpr absl::Duration kConnectTimeout = absl::Seconds(60);

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
  absl::Span<float> span() { return absl::MakeSpan(ptr_, n_); }
  absl::Span<const float> const_span() const { return absl::MakeConstSpan(ptr_, n_); }

 private:
  float* ptr_ = nullptr;
  size_t n_ = 0;
};

absl::Status SetDevice(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaSetDevice: ", cudaGetErrorString(e)));
  return absl::OkStatus();
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

// Host memory is refused, as are transfers to this rank (the raw
// communicator has no self-delivery), and the communicator stays usable.
TEST(NcclCommunicatorTest, RefusesHostMemoryAndTransfersToItself) {
  SKIP_UNLESS_GPUS(1);
  absl::StatusOr<std::unique_ptr<Communicator>> c =
      ConnectNccl(LocalFileSpec("nccl-world1"), 0, 1, 0, WorkerIdentity{"test", "plan", 1}, kConnectTimeout);
  ASSERT_TRUE(c.ok()) << c.status();
  Communicator& comm = **c;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world(), 1);
  EXPECT_EQ(comm.backend(), "nccl");
  ASSERT_OK(SetDevice(0));

  std::vector<float> host_data(4, 1.0f);
  const absl::Status host = comm.AllReduce(absl::MakeSpan(host_data), ReduceOp::kSum, Tag(1));
  EXPECT_EQ(host.code(), absl::StatusCode::kInvalidArgument) << host;
  EXPECT_TRUE(Contains(host, "host memory")) << host;

  DeviceBuffer small;
  ASSERT_OK(small.Init(4));
  EXPECT_EQ(comm.Send(small.const_span(), 0, Tag(2)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Recv(small.span(), 0, Tag(3)).code(), absl::StatusCode::kInvalidArgument);
  DeviceBuffer other;
  ASSERT_OK(other.Init(4));
  const absl::Status copy = comm.SendRecv(small.const_span(), 0, other.span(), 0, Tag(4));
  EXPECT_EQ(copy.code(), absl::StatusCode::kInvalidArgument) << copy;
  EXPECT_TRUE(Contains(copy, "must be other ranks of world 1")) << copy;

  EXPECT_OK(comm.AllReduce(small.span(), ReduceOp::kSum, Tag(5)));
  EXPECT_EQ(comm.traffic().calls, 1);
}

// The collectives a kernel placed on the GPU enqueues on its own stream:
// the same checks as the blocking forms (host memory refused, naming the
// stream), the results there once that stream is synchronised, each call
// counted, and no deferred failure.
TEST(NcclCommunicatorTest, CollectivesEnqueuedOnTheCallersStreamEndThereWithTheirResults) {
  SKIP_UNLESS_GPUS(1);
  absl::StatusOr<std::unique_ptr<Communicator>> c =
      ConnectNccl(LocalFileSpec("nccl-enqueued"), 0, 1, 0, WorkerIdentity{"test", "plan", 1}, kConnectTimeout);
  ASSERT_TRUE(c.ok()) << c.status();
  StreamCollectives* on_stream = (*c)->stream_collectives();
  ASSERT_NE(on_stream, nullptr);
  ASSERT_OK(SetDevice(0));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);

  std::vector<float> host(6, 1.0f);
  const absl::Status refused = on_stream->EnqueueReduceScatter(host, absl::MakeSpan(host), ReduceOp::kSum, Tag(1),
                                                               stream);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(Contains(refused, "on the caller's stream")) << refused;

  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  DeviceBuffer in, reduced, gathered, summed;
  ASSERT_OK(in.Init(values.size()));
  ASSERT_OK(reduced.Init(values.size()));
  ASSERT_OK(gathered.Init(values.size()));
  ASSERT_OK(summed.Init(values.size()));
  ASSERT_EQ(cudaMemcpyAsync(in.span().data(), values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice,
                            stream),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(summed.span().data(), values.data(), values.size() * sizeof(float),
                            cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  EXPECT_OK(on_stream->EnqueueReduceScatter(in.const_span(), reduced.span(), ReduceOp::kAvg, Tag(2), stream));
  EXPECT_OK(on_stream->EnqueueAllGather(in.const_span(), gathered.span(), Tag(3), stream));
  EXPECT_OK(on_stream->EnqueueAllReduce(summed.span(), ReduceOp::kSum, Tag(4), stream));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (DeviceBuffer* result : {&reduced, &gathered, &summed}) {
    std::vector<float> back(values.size());
    ASSERT_EQ(cudaMemcpy(back.data(), result->span().data(), back.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(back, values);  // a world of one: each collective's result is its input
  }
  EXPECT_EQ((*c)->traffic().calls, 3);
  EXPECT_OK(on_stream->DeferredFailure());
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// A 16-bit wire in a world of one: the sum over one rank is this rank's
// value rounded to the wire's type (the host's backends return it untouched
// there; here it goes through NCCL's 16-bit call), coded exactly as the
// host's conversions code it; blocking and on the caller's stream; kAvg
// scales by 1/world (1 here) in float32.
TEST(NcclCommunicatorTest, SixteenBitAllReduceRoundsEachValueToTheWire) {
  SKIP_UNLESS_GPUS(1);
  absl::StatusOr<std::unique_ptr<Communicator>> c =
      ConnectNccl(LocalFileSpec("nccl-wire"), 0, 1, 0, WorkerIdentity{"test", "plan", 1}, kConnectTimeout);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_OK(SetDevice(0));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const std::vector<float> values = {1.0f, 1.00048828125f, 1.0009765625f, 1.00390625f, -3.14159f, 65519.0f,
                                     1e-7f, 2.5e-5f, 123456.789f, -0.0f};
  for (WireType wire : {WireType::kFloat16, WireType::kBFloat16}) {
    for (bool enqueued : {false, true}) {
      SCOPED_TRACE(absl::StrCat(WireTypeName(wire), enqueued ? " on the caller's stream" : " blocking"));
      std::vector<uint16_t> codes(values.size());
      std::vector<float> expected(values.size());
      EncodeWire(wire, values, codes.data());
      DecodeWire(wire, codes.data(), absl::MakeSpan(expected));
      DeviceBuffer data;
      ASSERT_OK(data.Init(values.size()));
      ASSERT_EQ(cudaMemcpy(data.span().data(), values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
      CollectiveOptions options = Tag(5);
      options.wire = wire;
      if (enqueued) {
        EXPECT_OK((*c)->stream_collectives()->EnqueueAllReduce(data.span(), ReduceOp::kAvg, options, stream));
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      } else {
        EXPECT_OK((*c)->AllReduce(data.span(), ReduceOp::kSum, options));
      }
      std::vector<float> back(values.size());
      ASSERT_EQ(cudaMemcpy(back.data(), data.span().data(), back.size() * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(std::memcmp(&back[i], &expected[i], sizeof(float)), 0)
            << values[i] << ": " << back[i] << " on the GPU, " << expected[i] << " on the host";
      }
    }
  }
  EXPECT_OK((*c)->stream_collectives()->DeferredFailure());
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace nereid
