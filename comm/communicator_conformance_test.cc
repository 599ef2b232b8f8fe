// One conformance suite for every communicator backend, in the style of
// Gloo's own tests: the same cases, parameterised over
//   backend       gloo, shm, hierarchical, and nccl when built with CUDA
//                 (--config=cuda) on a machine with one GPU per rank (other
//                 worlds skip with the reason);
//   world size    1, 2, 3, 4, 8 (ranks as threads of this process);
//   message size  0, 1, 7, 1000 and 262147 floats (1 MiB; 65539 under TSan).
// Backends are made by name through CreateCommunicator, as the engine makes
// them. The hierarchical backend sees two "hosts" (NEREID_HOST_ID): the first
// half of the ranks, rounded up, and the rest ("AB", "AAB", "AABB",
// "AAAABBBB"), so from world 3 on it runs both of its levels.
//
// Values are small integers, so every sum is exact in float32 whatever the
// order of summation, and each expected result has a closed form; averages
// are taken of world x integers, so the mean is an integer too (and exact
// both as sum x 1/world and as the sum of each value x 1/world, NCCL's way).
//
// One world per (backend, world size) is connected at first use and reused
// by every case; argument errors leave it usable. The fault cases connect
// worlds of their own, with 1 s timeouts. Every wait is bounded: a rank that
// stops early makes its peers fail at the call timeout, not hang.
//
// What only one backend has stays in its own test: shm's segment, transport
// and cleanup (shm_communicator_test), the hierarchical layouts and stage
// names (hierarchical_communicator_test), Gloo's raw communicator and failure
// messages (gloo_communicator_test, gloo_failure_test), NCCL's device checks
// (nccl_communicator_test).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/abort_signal.h"
#include "comm/communicator.h"
#include "comm/communicator_factory.h"
#include "comm/gloo_test_world.h"
#include "comm/launch_env.h"
#include "comm/rendezvous_spec.h"
#include "comm/traffic_accounting.h"
#include "comm/wire_format.h"
#include "comm/worker_identity.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef NEREID_CONFORMANCE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace nereid {
namespace {

using ::nereid::testing::AllOk;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;
using ::testing::HasSubstr;

constexpr absl::Duration kConnectTimeout = absl::Seconds(30);
// Calls that should succeed: ample for TSan on two cores, and short enough
// that a rank that stops early fails the case instead of hanging the suite.
constexpr absl::Duration kCallTimeout = absl::Seconds(20);
// The fault cases: how long a missing or silent peer is waited for.
constexpr absl::Duration kFaultTimeout = absl::Seconds(1);
constexpr int64_t kFloatBytes = sizeof(float);

// --- Backends ---------------------------------------------------------------

struct Backend {
  std::string name;
  // One meter, counted by the traffic_accounting.h formulas, one call per
  // call (the hierarchical backend sums the stages of its inner ones).
  bool flat = true;
  // Spans must point at CUDA device memory on the rank's GPU (nccl).
  bool device_memory = false;
  // Calls with distinct tags may run at once from several threads (nccl
  // matches calls by issue order: one thread).
  bool concurrent_calls = true;
  // AllReduce takes 16-bit wire formats (nccl: Unimplemented).
  bool wire16 = true;
  // CollectiveOptions::abort ends a Send/Recv wait (nccl takes no signal).
  bool abortable = true;
};

Backend Traits(const std::string& name) {
  Backend b;
  b.name = name;
  if (name == "hierarchical") b.flat = false;
  if (name == "nccl") {
    b.device_memory = true;
    b.concurrent_calls = false;
    b.wire16 = false;
    b.abortable = false;
  }
  return b;
}

// The backends this suite runs; EveryRegisteredBackendIsCovered checks the
// list against the registry.
std::vector<std::string> ConformingBackends() {
  std::vector<std::string> names = {"gloo", "shm", "hierarchical"};
#ifdef NEREID_CONFORMANCE_NCCL
  names.push_back("nccl");
#endif
  return names;
}

#ifdef NEREID_CONFORMANCE_NCCL
int CudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

absl::Status CudaError(int rank, const char* call, cudaError_t error) {
  return absl::InternalError(absl::StrCat("rank ", rank, ": ", call, ": ", cudaGetErrorString(error)));
}
#endif

// Empty if `backend` can run `world` ranks on this machine, else why not.
std::string SkipReason(const Backend& backend, int world) {
  if (!backend.device_memory) return "";
#ifdef NEREID_CONFORMANCE_NCCL
  const int devices = CudaDevices();
  if (devices >= world) return "";
  return absl::StrCat(backend.name, " with ", world, " rank(s) needs one CUDA device per rank; found ", devices);
#else
  return absl::StrCat(backend.name, " needs a build with CUDA (--config=cuda)");
#endif
}

// The environment every rank reads (no NEREID_FAULTS): its host, for the
// hierarchical backend.
EnvGetter TestEnv(int rank, int world) {
  const std::string host = rank < (world + 1) / 2 ? "A" : "B";
  return [host](const std::string& name) -> std::optional<std::string> {
    if (name == "NEREID_HOST_ID") return host;
    return std::nullopt;
  };
}

CommunicatorSpec Spec(const std::string& backend, const RendezvousSpec& rendezvous, int rank, int world,
                      absl::Duration connect_timeout) {
  CommunicatorSpec spec;
  spec.backend = backend;
  spec.rendezvous = rendezvous;
  spec.rank = rank;
  spec.world = world;
  spec.identity = WorkerIdentity{"test", "plan", world};
  spec.connect_timeout = connect_timeout;
  spec.device = rank;  // nccl: one GPU per rank
  spec.env = TestEnv(rank, world);
  return spec;
}

using World = std::vector<std::unique_ptr<Communicator>>;

absl::StatusOr<World> Connect(const std::string& backend, int world, const std::string& label) {
  const RendezvousSpec rendezvous = LocalFileSpec(absl::StrCat("conformance-", backend, "-", label));
  World comms(world);
  RETURN_IF_ERROR(AllOk(RunOnRanks(world, [&](int rank) -> absl::Status {
    ASSIGN_OR_RETURN(comms[rank], CreateCommunicator(Spec(backend, rendezvous, rank, world, kConnectTimeout)));
    return absl::OkStatus();
  })));
  return comms;
}

// One connected world per (backend, world size), shared by the cases and
// dropped at exit.
class WorldCache : public ::testing::Environment {
 public:
  // Null if the world did not connect (reported by the case that tried).
  static World* Get(const std::string& backend, int world) {
    Entry& entry = entries()[{backend, world}];
    if (!entry.tried) {
      entry.tried = true;
      absl::StatusOr<World> connected = Connect(backend, world, absl::StrCat("world", world));
      if (connected.ok()) {
        entry.world = *std::move(connected);
      } else {
        entry.error = connected.status();
        ADD_FAILURE() << backend << ": a world of " << world << " did not connect: " << entry.error;
      }
    }
    return entry.error.ok() ? &entry.world : nullptr;
  }
  void TearDown() override { entries().clear(); }

 private:
  struct Entry {
    bool tried = false;
    absl::Status error;
    World world;
  };
  static std::map<std::pair<std::string, int>, Entry>& entries() {
    static auto* e = new std::map<std::pair<std::string, int>, Entry>;
    return *e;
  }
};

const ::testing::Environment* const kWorldCache = ::testing::AddGlobalTestEnvironment(new WorldCache);

// --- Buffers ------------------------------------------------------------------

// The memory a backend's spans point at, for one rank's thread: the host
// vectors themselves, or (nccl) copies of them on the rank's GPU.
class RankMemory {
 public:
  RankMemory(bool device, int rank) : device_(device), rank_(rank) {}
  ~RankMemory() { Release(); }
  RankMemory(const RankMemory&) = delete;
  RankMemory& operator=(const RankMemory&) = delete;

  // A span of the backend's memory holding `host`'s values. `host` must stay
  // where it is until Fetch.
  absl::StatusOr<absl::Span<float>> Put(std::vector<float>& host) {
    if (!device_) return absl::MakeSpan(host);
#ifdef NEREID_CONFORMANCE_NCCL
    if (const cudaError_t e = cudaSetDevice(rank_); e != cudaSuccess) return CudaError(rank_, "cudaSetDevice", e);
    if (host.empty()) return absl::Span<float>();
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, host.size() * sizeof(float)); e != cudaSuccess) {
      return CudaError(rank_, "cudaMalloc", e);
    }
    float* device = static_cast<float*>(p);
    copies_.push_back({&host, device});
    if (const cudaError_t e = cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return CudaError(rank_, "cudaMemcpy to the device", e);
    }
    return absl::MakeSpan(device, host.size());
#else
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, ": device memory needs a build with CUDA"));
#endif
  }

  // Copies what the spans Put handed out hold back into their vectors, and
  // forgets them.
  absl::Status Fetch() {
    absl::Status status;
#ifdef NEREID_CONFORMANCE_NCCL
    for (const Copy& c : copies_) {
      const cudaError_t e =
          cudaMemcpy(c.host->data(), c.device, c.host->size() * sizeof(float), cudaMemcpyDeviceToHost);
      if (e != cudaSuccess && status.ok()) status = CudaError(rank_, "cudaMemcpy to the host", e);
    }
#endif
    Release();
    return status;
  }

 private:
  struct Copy {
    std::vector<float>* host;
    float* device;
  };
  void Release() {
#ifdef NEREID_CONFORMANCE_NCCL
    for (const Copy& c : copies_) (void)cudaFree(c.device);
#endif
    copies_.clear();
  }

  const bool device_;
  const int rank_;
  std::vector<Copy> copies_;
};

using RankFn = std::function<absl::Status(int rank, Communicator& c, RankMemory& memory)>;

// Runs fn on every rank of `world` at once, each on its own thread.
absl::Status RunOnWorld(const Backend& backend, World& world, const RankFn& fn) {
  return AllOk(RunOnRanks(static_cast<int>(world.size()), [&](int r) {
    RankMemory memory(backend.device_memory, r);
    return fn(r, *world[r], memory);
  }));
}

// --- Values and checks --------------------------------------------------------

// Integer-valued and small: any sum of up to 8 of them (or of 8 times them)
// is exact in float32.
float Value(int rank, size_t i) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1024)); }

float SumOverRanks(int world, size_t i) {
  float sum = 0;
  for (int r = 0; r < world; ++r) sum += Value(r, i);
  return sum;
}

// scale x Value(rank, offset + i) for i < size.
std::vector<float> Values(int rank, size_t size, size_t offset = 0, float scale = 1.0f) {
  std::vector<float> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = scale * Value(rank, offset + i);
  return v;
}

absl::Status ExpectValues(int rank, const std::string& what, const std::vector<float>& got,
                          const std::function<float(size_t)>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    const float w = want(i);
    if (got[i] != w) {
      return absl::InternalError(
          absl::StrCat("rank ", rank, " ", what, ": element ", i, " of ", got.size(), " is ", got[i], ", want ", w));
    }
  }
  return absl::OkStatus();
}

CollectiveOptions Options(uint32_t tag, absl::Duration timeout = kCallTimeout) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = timeout;
  return o;
}

// What some calls did to one rank's counters.
struct Delta {
  int64_t sent = 0;
  int64_t received = 0;
  int64_t calls = 0;
};

Delta Diff(const TrafficCounters& before, const TrafficCounters& after) {
  Delta d;
  d.sent = after.bytes_sent - before.bytes_sent;
  d.received = after.bytes_received - before.bytes_received;
  d.calls = after.calls - before.calls;
  return d;
}

// Every backend: no counter goes back, the ranks together receive the bytes
// they sent, and bytes are counted exactly when `moves` (a message that is
// not empty, between two or more ranks). Flat backends besides: each rank's
// bytes are `want(rank)`, in `calls` calls.
void ExpectTraffic(const Backend& backend, const std::string& what, const std::vector<Delta>& deltas, bool moves,
                   int64_t calls, const std::function<TrafficBytes(int rank)>& want) {
  int64_t sent = 0, received = 0;
  for (size_t r = 0; r < deltas.size(); ++r) {
    const Delta& d = deltas[r];
    EXPECT_GE(d.sent, 0) << what << ", rank " << r;
    EXPECT_GE(d.received, 0) << what << ", rank " << r;
    EXPECT_GE(d.calls, 0) << what << ", rank " << r;
    if (backend.flat) {
      const TrafficBytes w = want(static_cast<int>(r));
      EXPECT_EQ(d.sent, w.sent) << what << ", rank " << r << ": bytes sent";
      EXPECT_EQ(d.received, w.received) << what << ", rank " << r << ": bytes received";
      EXPECT_EQ(d.calls, calls) << what << ", rank " << r << ": calls";
    }
    sent += d.sent;
    received += d.received;
  }
  EXPECT_EQ(sent, received) << what << ": the ranks together sent " << sent << " bytes and received " << received;
  if (moves) {
    EXPECT_GT(sent, 0) << what << ": no bytes counted";
  } else {
    EXPECT_EQ(sent, 0) << what << ": bytes counted for calls that move none";
  }
}

TrafficBytes Plus(TrafficBytes a, TrafficBytes b) { return TrafficBytes{a.sent + b.sent, a.received + b.received}; }

// The words after the call's description: "gloo/tcp allgather (tag 3, rank 0
// of 4): output has ..." -> "output has ...".
std::string Detail(const absl::Status& status) {
  const absl::string_view message = status.message();
  const size_t colon = message.find(": ");
  return std::string(colon == absl::string_view::npos ? message : message.substr(colon + 2));
}

// --- Fixtures -------------------------------------------------------------------

using SizedParam = std::tuple<std::string, int, size_t>;  // backend, world, elements
using WorldParam = std::tuple<std::string, int>;          // backend, world

// The cached world of the parameters' backend and size; skips what this
// machine cannot run.
template <typename Param>
class WorldTestBase : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    backend_ = Traits(std::get<0>(this->GetParam()));
    n_ = std::get<1>(this->GetParam());
    const std::string skip = SkipReason(backend_, n_);
    if (!skip.empty()) GTEST_SKIP() << skip;
    world_ = WorldCache::Get(backend_.name, n_);
    ASSERT_NE(world_, nullptr) << backend_.name << ": the world of " << n_
                               << " is not connected (see the first case that used it)";
  }

  const Backend& backend() const { return backend_; }
  int n() const { return n_; }
  absl::Status OnRanks(const RankFn& fn) { return RunOnWorld(backend_, *world_, fn); }

 private:
  Backend backend_;
  int n_ = 0;
  World* world_ = nullptr;
};

class CommunicatorConformanceTest : public WorldTestBase<SizedParam> {
 protected:
  size_t size() const { return std::get<2>(GetParam()); }
  int64_t bytes() const { return static_cast<int64_t>(size()) * kFloatBytes; }
  // A collective of this size moves bytes.
  bool moves() const { return n() > 1 && size() > 0; }
};

// The same parameters, worlds of two or more.
class CommunicatorPointToPointTest : public CommunicatorConformanceTest {};

// Backend and world size only.
class CommunicatorWorldTest : public WorldTestBase<WorldParam> {};

// Backend only; each case connects (or fails to connect) its own world.
class CommunicatorFaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { backend_ = Traits(GetParam()); }
  Backend backend_;
};

// --- Collectives ------------------------------------------------------------------

TEST_P(CommunicatorConformanceTest, AllReduceSum) {
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    std::vector<float> data = Values(r, size());
    ASSIGN_OR_RETURN(const absl::Span<float> span, memory.Put(data));
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.AllReduce(span, ReduceOp::kSum, Options(1)));
    traffic[r] = Diff(before, c.traffic());
    RETURN_IF_ERROR(memory.Fetch());
    return ExpectValues(r, "allreduce sum", data, [&](size_t i) { return SumOverRanks(n(), i); });
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "allreduce sum", traffic, moves(), 1,
                [&](int) { return RingAllReduceTraffic(n(), bytes()); });
}

// Every rank holds world x its values: the mean is the (integer) sum of the
// values, exact however the backend divides.
TEST_P(CommunicatorConformanceTest, AllReduceAverage) {
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    std::vector<float> data = Values(r, size(), 0, static_cast<float>(n()));
    ASSIGN_OR_RETURN(const absl::Span<float> span, memory.Put(data));
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.AllReduce(span, ReduceOp::kAvg, Options(2)));
    traffic[r] = Diff(before, c.traffic());
    RETURN_IF_ERROR(memory.Fetch());
    return ExpectValues(r, "allreduce average", data, [&](size_t i) { return SumOverRanks(n(), i); });
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "allreduce average", traffic, moves(), 1,
                [&](int) { return RingAllReduceTraffic(n(), bytes()); });
}

// 16-bit wire formats: every rank ends bitwise equal; each element is within
// the rounding a ring allows (a partial sum is rounded before each of its
// hops and once more by its owner: at most n half-ulps of the sum of
// magnitudes); the wire really is 16-bit (values with more mantissa bits than
// it keeps come back rounded); flat backends count half the bytes of float32.
// A backend without them refuses with Unimplemented and stays usable.
TEST_P(CommunicatorConformanceTest, AllReduceWith16BitWire) {
  for (WireType wire : {WireType::kFloat16, WireType::kBFloat16}) {
    SCOPED_TRACE(WireTypeName(wire));
    if (!backend().wire16) {
      const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
        std::vector<float> data(size(), 1.0f);
        ASSIGN_OR_RETURN(const absl::Span<float> span, memory.Put(data));
        CollectiveOptions options = Options(3);
        options.wire = wire;
        const absl::Status refused = c.AllReduce(span, ReduceOp::kSum, options);
        if (refused.code() == absl::StatusCode::kUnimplemented) return absl::OkStatus();
        return absl::InternalError(absl::StrCat("rank ", r, ": want Unimplemented, got ", refused.ToString()));
      });
      EXPECT_TRUE(status.ok()) << status;
      continue;
    }
    const float half_ulp = wire == WireType::kFloat16 ? 0x1p-11f : 0x1p-8f;
    auto value = [](int r, size_t i) {
      return 1.0f + 0.001f * static_cast<float>(r) + 1e-6f * static_cast<float>(i % 997);
    };
    std::vector<std::vector<float>> results(n());
    std::vector<Delta> traffic(n());
    const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
      std::vector<float> data(size());
      for (size_t i = 0; i < data.size(); ++i) data[i] = value(r, i);
      ASSIGN_OR_RETURN(const absl::Span<float> span, memory.Put(data));
      CollectiveOptions options = Options(3);
      options.wire = wire;
      const TrafficCounters before = c.traffic();
      RETURN_IF_ERROR(c.AllReduce(span, ReduceOp::kSum, options));
      traffic[r] = Diff(before, c.traffic());
      RETURN_IF_ERROR(memory.Fetch());
      results[r] = std::move(data);
      return absl::OkStatus();
    });
    ASSERT_TRUE(status.ok()) << status;
    bool rounded = false;
    for (size_t i = 0; i < size(); ++i) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < n(); ++r) {
        exact += value(r, i);
        magnitude += std::fabs(value(r, i));
      }
      for (int r = 1; r < n(); ++r) ASSERT_EQ(results[r][i], results[0][i]) << "rank " << r << " element " << i;
      ASSERT_LE(std::fabs(results[0][i] - exact), n() * half_ulp * magnitude) << "element " << i;
      rounded |= static_cast<double>(results[0][i]) != static_cast<double>(static_cast<float>(exact));
    }
    if (n() > 1 && size() > 1) {
      EXPECT_TRUE(rounded) << "nothing was rounded";
    }
    ExpectTraffic(backend(), absl::StrCat("allreduce over ", WireTypeName(wire)), traffic, moves(), 1,
                  [&](int) { return RingAllReduceTraffic(n(), static_cast<int64_t>(size()) * 2); });
  }
}

// The input holds world x size() elements; rank r ends with the reduction of
// chunk r.
TEST_P(CommunicatorConformanceTest, ReduceScatter) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    const bool sum = op == ReduceOp::kSum;
    const std::string what = sum ? "reduce-scatter sum" : "reduce-scatter average";
    std::vector<Delta> traffic(n());
    const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
      std::vector<float> data = Values(r, size() * n(), 0, sum ? 1.0f : static_cast<float>(n()));
      std::vector<float> out(size(), -1.0f);
      ASSIGN_OR_RETURN(const absl::Span<float> in_span, memory.Put(data));
      ASSIGN_OR_RETURN(const absl::Span<float> out_span, memory.Put(out));
      const TrafficCounters before = c.traffic();
      RETURN_IF_ERROR(c.ReduceScatter(in_span, out_span, op, Options(sum ? 4 : 5)));
      traffic[r] = Diff(before, c.traffic());
      RETURN_IF_ERROR(memory.Fetch());
      const size_t first = static_cast<size_t>(r) * size();
      return ExpectValues(r, what, out, [&](size_t i) { return SumOverRanks(n(), first + i); });
    });
    EXPECT_TRUE(status.ok()) << what << ": " << status;
    if (!status.ok()) continue;
    ExpectTraffic(backend(), what, traffic, moves(), 1,
                  [&](int) { return RingReduceScatterTraffic(n(), bytes() * n()); });
  }
}

// Each rank contributes size() elements; every rank ends with all blocks,
// rank 0's first.
TEST_P(CommunicatorConformanceTest, AllGather) {
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    std::vector<float> in = Values(r, size());
    std::vector<float> out(size() * n(), -1.0f);
    ASSIGN_OR_RETURN(const absl::Span<float> in_span, memory.Put(in));
    ASSIGN_OR_RETURN(const absl::Span<float> out_span, memory.Put(out));
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.AllGather(in_span, out_span, Options(6)));
    traffic[r] = Diff(before, c.traffic());
    RETURN_IF_ERROR(memory.Fetch());
    return ExpectValues(r, "allgather", out,
                        [&](size_t i) { return Value(static_cast<int>(i / size()), i % size()); });
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "allgather", traffic, moves(), 1,
                [&](int) { return RingAllGatherTraffic(n(), bytes() * n()); });
}

// From every root in turn, each with its own tag and values.
TEST_P(CommunicatorConformanceTest, BroadcastFromEveryRoot) {
  std::vector<std::vector<Delta>> traffic(n(), std::vector<Delta>(n()));
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    std::vector<std::vector<float>> got(n());
    for (int root = 0; root < n(); ++root) {
      got[root] = r == root ? Values(root, size(), root) : std::vector<float>(size(), -1.0f);
      ASSIGN_OR_RETURN(const absl::Span<float> span, memory.Put(got[root]));
      const TrafficCounters before = c.traffic();
      RETURN_IF_ERROR(c.Broadcast(span, root, Options(10 + root)));
      traffic[root][r] = Diff(before, c.traffic());
      RETURN_IF_ERROR(memory.Fetch());
    }
    for (int root = 0; root < n(); ++root) {
      RETURN_IF_ERROR(ExpectValues(r, absl::StrCat("broadcast from ", root), got[root],
                                   [&](size_t i) { return Value(root, static_cast<size_t>(root) + i); }));
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (int root = 0; root < n(); ++root) {
    ExpectTraffic(backend(), absl::StrCat("broadcast from ", root), traffic[root], moves(), 1,
                  [&](int r) { return BinomialBroadcastTraffic(n(), r, root, bytes()); });
  }
}

// Rounds of an allreduce, a broadcast, an allgather and a barrier, each call
// with its own tag, one after another in the same order on every rank: every
// call meets its own partners, and flat backends count them all.
TEST_P(CommunicatorConformanceTest, ConsecutiveCollectivesWithDistinctTags) {
  constexpr int kRounds = 3;
  struct Round {
    std::vector<float> sum, broadcast, mine, gathered;
  };
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    std::vector<Round> rounds(kRounds);
    const TrafficCounters before = c.traffic();
    for (int k = 0; k < kRounds; ++k) {
      Round& round = rounds[k];
      const int root = k % n();
      const size_t offset = static_cast<size_t>(k);
      round.sum = Values(r, size(), offset);
      round.broadcast = r == root ? Values(root, size(), offset) : std::vector<float>(size(), -1.0f);
      round.mine = Values(r, size(), offset);
      round.gathered.assign(size() * n(), -1.0f);
      ASSIGN_OR_RETURN(const absl::Span<float> sum, memory.Put(round.sum));
      ASSIGN_OR_RETURN(const absl::Span<float> broadcast, memory.Put(round.broadcast));
      ASSIGN_OR_RETURN(const absl::Span<float> mine, memory.Put(round.mine));
      ASSIGN_OR_RETURN(const absl::Span<float> gathered, memory.Put(round.gathered));
      RETURN_IF_ERROR(c.AllReduce(sum, ReduceOp::kSum, Options(40 + k)));
      RETURN_IF_ERROR(c.Broadcast(broadcast, root, Options(50 + k)));
      RETURN_IF_ERROR(c.AllGather(mine, gathered, Options(60 + k)));
      RETURN_IF_ERROR(c.Barrier(Options(70 + k)));
      RETURN_IF_ERROR(memory.Fetch());
    }
    traffic[r] = Diff(before, c.traffic());
    for (int k = 0; k < kRounds; ++k) {
      const Round& round = rounds[k];
      const int root = k % n();
      const size_t offset = static_cast<size_t>(k);
      const std::string when = absl::StrCat("round ", k, " ");
      RETURN_IF_ERROR(ExpectValues(r, when + "allreduce", round.sum,
                                   [&](size_t i) { return SumOverRanks(n(), offset + i); }));
      RETURN_IF_ERROR(ExpectValues(r, when + "broadcast", round.broadcast,
                                   [&](size_t i) { return Value(root, offset + i); }));
      RETURN_IF_ERROR(ExpectValues(r, when + "allgather", round.gathered, [&](size_t i) {
        return Value(static_cast<int>(i / size()), offset + i % size());
      }));
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "the rounds", traffic, moves(), 4 * kRounds, [&](int r) {
    TrafficBytes total;
    for (int k = 0; k < kRounds; ++k) {
      total = Plus(total, RingAllReduceTraffic(n(), bytes()));
      total = Plus(total, BinomialBroadcastTraffic(n(), r, k % n(), bytes()));
      total = Plus(total, RingAllGatherTraffic(n(), bytes() * n()));
    }
    return total;
  });
}

// --- Point to point ------------------------------------------------------------------

// Each rank sends to its right neighbour and receives from its left. Send may
// wait for the matching Recv, so even ranks send first and odd ranks receive
// first.
TEST_P(CommunicatorPointToPointTest, SendAndRecvAroundARing) {
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    const int right = (r + 1) % n(), left = (r + n() - 1) % n();
    std::vector<float> mine = Values(r, size());
    std::vector<float> theirs(size(), -1.0f);
    ASSIGN_OR_RETURN(const absl::Span<float> send, memory.Put(mine));
    ASSIGN_OR_RETURN(const absl::Span<float> recv, memory.Put(theirs));
    const TrafficCounters before = c.traffic();
    if (r % 2 == 0) {
      RETURN_IF_ERROR(c.Send(send, right, Options(20)));
      RETURN_IF_ERROR(c.Recv(recv, left, Options(20)));
    } else {
      RETURN_IF_ERROR(c.Recv(recv, left, Options(20)));
      RETURN_IF_ERROR(c.Send(send, right, Options(20)));
    }
    traffic[r] = Diff(before, c.traffic());
    RETURN_IF_ERROR(memory.Fetch());
    return ExpectValues(r, absl::StrCat("recv from ", left), theirs, [&](size_t i) { return Value(left, i); });
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "send and recv", traffic, size() > 0, 2,
                [&](int) { return TrafficBytes{bytes(), bytes()}; });
}

// SendRecv: every rank sends to its right neighbour and receives from its
// left at once (all "send first"), which Send and Recv alone could deadlock.
TEST_P(CommunicatorPointToPointTest, ShiftWhereEveryRankSendsFirst) {
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory& memory) -> absl::Status {
    const int right = (r + 1) % n(), left = (r + n() - 1) % n();
    std::vector<float> mine = Values(r, size());
    std::vector<float> theirs(size(), -1.0f);
    ASSIGN_OR_RETURN(const absl::Span<float> send, memory.Put(mine));
    ASSIGN_OR_RETURN(const absl::Span<float> recv, memory.Put(theirs));
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.SendRecv(send, right, recv, left, Options(21)));
    traffic[r] = Diff(before, c.traffic());
    RETURN_IF_ERROR(memory.Fetch());
    return ExpectValues(r, absl::StrCat("sendrecv from ", left), theirs, [&](size_t i) { return Value(left, i); });
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "sendrecv", traffic, size() > 0, 1, [&](int) { return TrafficBytes{bytes(), bytes()}; });
}

// --- Per world: barrier, concurrency, argument checks ----------------------------------

// Nobody leaves the barrier before everybody has entered it; it moves no bytes.
TEST_P(CommunicatorWorldTest, BarrierWaitsForEveryRank) {
  std::atomic<int> entered{0};
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory&) -> absl::Status {
    // Late ranks make the case meaningful: rank r enters after r x 20 ms.
    absl::SleepFor(absl::Milliseconds(20 * r));
    entered.fetch_add(1);
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.Barrier(Options(30)));
    traffic[r] = Diff(before, c.traffic());
    if (entered.load() == n()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("rank ", r, " left the barrier before every rank had entered it"));
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "barrier", traffic, false, 1, [](int) { return TrafficBytes{}; });
}

// Several threads of every rank at once, each with its own tag.
TEST_P(CommunicatorWorldTest, ConcurrentCallsWithDistinctTags) {
  if (!backend().concurrent_calls) {
    GTEST_SKIP() << backend().name << " matches calls by issue order: they come from one thread";
  }
  constexpr int kThreads = 3;
  constexpr int kRounds = 5;
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory&) -> absl::Status {
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(AllOk(RunOnRanks(kThreads, [&](int t) -> absl::Status {
      for (int round = 0; round < kRounds; ++round) {
        const size_t offset = static_cast<size_t>(t * kRounds + round);
        std::vector<float> data = Values(r, static_cast<size_t>(1000 + 17 * t), offset);
        RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(100 + t)));
        RETURN_IF_ERROR(ExpectValues(r, absl::StrCat("thread ", t, " round ", round), data,
                                     [&](size_t i) { return SumOverRanks(n(), offset + i); }));
      }
      return absl::OkStatus();
    })));
    traffic[r] = Diff(before, c.traffic());
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  ExpectTraffic(backend(), "concurrent allreduces", traffic, n() > 1, kThreads * kRounds, [&](int) {
    TrafficBytes total;
    for (int t = 0; t < kThreads; ++t) {
      for (int round = 0; round < kRounds; ++round) {
        total = Plus(total, RingAllReduceTraffic(n(), (1000 + 17 * t) * kFloatBytes));
      }
    }
    return total;
  });
}

// The checks every backend makes before moving a byte (collective_checks.h):
// InvalidArgument with the same words after the call's description on every
// backend, nothing counted, and the communicator still usable (the cases
// after this one run on the same world).
TEST_P(CommunicatorWorldTest, RefusesBadArgumentsInTheSameWords) {
  constexpr uint32_t kTag = 77;
  struct Refusal {
    std::string call;
    absl::Status status;
    std::string want;
  };
  std::vector<std::vector<Refusal>> refusals(n());
  std::vector<Delta> traffic(n());
  const absl::Status status = OnRanks([&](int r, Communicator& c, RankMemory&) -> absl::Status {
    const int w = n();
    const int other = w == 1 ? 1 : (r + 1) % w;  // not this rank (and for world 1 not a rank at all)
    std::vector<float> big(3 * w + 1), three(3), exact(3 * w), more(3);
    const CollectiveOptions o = Options(kTag);
    const CollectiveOptions zero = Options(kTag, absl::ZeroDuration());
    const CollectiveOptions negative = Options(kTag, absl::Seconds(-1));
    const TrafficCounters before = c.traffic();
    std::vector<Refusal>& out = refusals[r];
    out.push_back({"reduce-scatter into too small an output",
                   c.ReduceScatter(big, absl::MakeSpan(three), ReduceOp::kSum, o),
                   absl::StrCat("input has ", 3 * w + 1, " elements, expected world (", w, ") x output (3) = ",
                                3 * w)});
    out.push_back({"allgather into too large an output", c.AllGather(three, absl::MakeSpan(big), o),
                   absl::StrCat("output has ", 3 * w + 1, " elements, expected world (", w, ") x input (3) = ",
                                3 * w)});
    out.push_back({"broadcast from root = world", c.Broadcast(absl::MakeSpan(three), w, o),
                   absl::StrCat("root ", w, " is not a rank of world ", w)});
    out.push_back({"broadcast from root -1", c.Broadcast(absl::MakeSpan(three), -1, o),
                   absl::StrCat("root -1 is not a rank of world ", w)});
    out.push_back({"send to peer = world", c.Send(three, w, o),
                   absl::StrCat("peer ", w, " is not another rank of world ", w)});
    out.push_back({"recv from peer -1", c.Recv(absl::MakeSpan(three), -1, o),
                   absl::StrCat("peer -1 is not another rank of world ", w)});
    out.push_back({"sendrecv to itself from another", c.SendRecv(three, r, absl::MakeSpan(more), other, o),
                   absl::StrCat("ranks ", r, " and ", other, " must both be this rank or both other ranks of world ",
                                w)});
    out.push_back({"allreduce with timeout 0", c.AllReduce(absl::MakeSpan(three), ReduceOp::kSum, zero),
                   "timeout must be positive, got 0"});
    out.push_back({"allgather with timeout 0", c.AllGather(three, absl::MakeSpan(exact), zero),
                   "timeout must be positive, got 0"});
    out.push_back({"barrier with timeout -1s", c.Barrier(negative), "timeout must be positive, got -1s"});
    traffic[r] = Diff(before, c.traffic());
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 0; r < n(); ++r) {
    for (const Refusal& refusal : refusals[r]) {
      SCOPED_TRACE(absl::StrCat("rank ", r, ": ", refusal.call));
      EXPECT_EQ(refusal.status.code(), absl::StatusCode::kInvalidArgument) << refusal.status;
      EXPECT_EQ(Detail(refusal.status), refusal.want) << refusal.status;
      EXPECT_THAT(std::string(refusal.status.message()),
                  HasSubstr(absl::StrCat("tag ", kTag, ", rank ", r, " of ", n())));
    }
    EXPECT_EQ(traffic[r].sent, 0) << "rank " << r;
    EXPECT_EQ(traffic[r].received, 0) << "rank " << r;
    EXPECT_EQ(traffic[r].calls, 0) << "rank " << r;
  }
}

// --- Faults ------------------------------------------------------------------------------

// Rank 0 of a world whose rank 1 never comes, and rank 1 of another whose
// rank 0 never comes: both connects end in DeadlineExceeded at about the
// connect timeout.
TEST_P(CommunicatorFaultTest, APeerThatNeverJoinsEndsTheConnect) {
  const std::string skip = SkipReason(backend_, 1);
  if (!skip.empty()) GTEST_SKIP() << skip;
  std::vector<absl::Status> got(2);
  std::vector<absl::Duration> took(2);
  RunOnRanks(2, [&](int alone) -> absl::Status {
    CommunicatorSpec spec = Spec(backend_.name, LocalFileSpec(absl::StrCat("conformance-", backend_.name, "-alone")),
                                 alone, 2, kFaultTimeout);
    spec.device = 0;  // nccl: one GPU is enough to wait alone
    const absl::Time start = absl::Now();
    got[alone] = CreateCommunicator(spec).status();
    took[alone] = absl::Now() - start;
    return absl::OkStatus();
  });
  for (int alone : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("rank ", alone, " alone"));
    EXPECT_EQ(got[alone].code(), absl::StatusCode::kDeadlineExceeded) << got[alone];
    EXPECT_THAT(std::string(got[alone].message()), HasSubstr("never published")) << got[alone];
    EXPECT_LT(took[alone], kFaultTimeout + absl::Seconds(5));
  }
}

// Rank 1 is connected and alive but never calls: rank 0's allreduce ends at
// its timeout in an error naming the call, and the communicator fails fast
// afterwards instead of waiting again.
TEST_P(CommunicatorFaultTest, ASilentPeerEndsTheCallAtItsTimeout) {
  const std::string skip = SkipReason(backend_, 2);
  if (!skip.empty()) GTEST_SKIP() << skip;
  absl::StatusOr<World> world = Connect(backend_.name, 2, "silent");
  ASSERT_TRUE(world.ok()) << world.status();
  absl::Notification done;
  absl::Status timed_out, after;
  absl::Duration took, after_took;
  RunOnRanks(2, [&](int r) -> absl::Status {
    if (r == 1) {
      done.WaitForNotificationWithTimeout(kCallTimeout);
      return absl::OkStatus();
    }
    RankMemory memory(backend_.device_memory, 0);
    std::vector<float> data(1000, 1.0f);
    absl::StatusOr<absl::Span<float>> span = memory.Put(data);
    if (span.ok()) {
      const absl::Time start = absl::Now();
      timed_out = (*world)[0]->AllReduce(*span, ReduceOp::kSum, Options(91, kFaultTimeout));
      took = absl::Now() - start;
      const absl::Time again = absl::Now();
      after = (*world)[0]->Barrier(Options(92, kFaultTimeout));
      after_took = absl::Now() - again;
    } else {
      timed_out = span.status();
    }
    done.Notify();
    return absl::OkStatus();
  });
  EXPECT_TRUE(timed_out.code() == absl::StatusCode::kDeadlineExceeded ||
              timed_out.code() == absl::StatusCode::kUnavailable)
      << timed_out;
  EXPECT_THAT(std::string(timed_out.message()), HasSubstr("allreduce")) << timed_out;
  EXPECT_THAT(std::string(timed_out.message()), HasSubstr("tag 91")) << timed_out;
  EXPECT_THAT(std::string(timed_out.message()), HasSubstr("rank 0 of 2")) << timed_out;
  EXPECT_GE(took, kFaultTimeout * 0.9);
  EXPECT_LT(took, kFaultTimeout + absl::Seconds(3));
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  EXPECT_THAT(std::string(after.message()), HasSubstr("earlier failure")) << after;
  EXPECT_LT(after_took, kFaultTimeout);
}

// An abort signal ends a receive nobody sends to at once (the rank is
// failing), long before the timeout.
TEST_P(CommunicatorFaultTest, AnAbortEndsAWaitAtOnce) {
  if (!backend_.abortable) GTEST_SKIP() << backend_.name << " transfers take no abort signal";
  const std::string skip = SkipReason(backend_, 2);
  if (!skip.empty()) GTEST_SKIP() << skip;
  absl::StatusOr<World> world = Connect(backend_.name, 2, "abort");
  ASSERT_TRUE(world.ok()) << world.status();
  absl::Notification done;
  absl::Status aborted;
  absl::Duration took;
  RunOnRanks(2, [&](int r) -> absl::Status {
    if (r == 1) {
      done.WaitForNotificationWithTimeout(kCallTimeout);
      return absl::OkStatus();
    }
    AbortSignal abort;
    std::thread firing([&abort] {
      absl::SleepFor(absl::Milliseconds(100));
      abort.Fire();
    });
    std::vector<float> data(5);
    CollectiveOptions options = Options(93);
    options.abort = &abort;
    const absl::Time start = absl::Now();
    aborted = (*world)[0]->Recv(absl::MakeSpan(data), 1, options);
    took = absl::Now() - start;
    firing.join();
    done.Notify();
    return absl::OkStatus();
  });
  EXPECT_EQ(aborted.code(), absl::StatusCode::kCancelled) << aborted;
  EXPECT_LT(took, absl::Seconds(5));
}

// --- Coverage -------------------------------------------------------------------------------

// Every backend linked into this test is one the suite runs, and the other
// way round (a backend library missing from the deps would not register).
TEST(CommunicatorConformanceCoverageTest, EveryRegisteredBackendIsCovered) {
  const std::vector<std::string> covered = ConformingBackends();
  const std::vector<std::string> registered = CommunicatorRegistry::Global().Names();
  for (const std::string& name : registered) {
    const bool known = std::find(covered.begin(), covered.end(), name) != covered.end();
    EXPECT_TRUE(known) << "backend '" << name << "' is registered but this suite does not run it";
  }
  for (const std::string& name : covered) {
    const bool linked = std::find(registered.begin(), registered.end(), name) != registered.end();
    EXPECT_TRUE(linked) << "backend '" << name << "' is not registered: link its library into this test";
  }
}

// --- Parameters -------------------------------------------------------------------------------

// The largest message: 1 MiB of floats and an odd count, a quarter of that
// under TSan (its slowdown).
size_t LargestMessage() {
  const char* sanitizer = std::getenv("NEREID_SANITIZER");
  return sanitizer != nullptr && std::string(sanitizer) == "thread" ? size_t{65539} : size_t{262147};
}

std::string SizedName(const ::testing::TestParamInfo<SizedParam>& info) {
  return absl::StrCat(std::get<0>(info.param), "_world", std::get<1>(info.param), "_size", std::get<2>(info.param));
}

std::string WorldName(const ::testing::TestParamInfo<WorldParam>& info) {
  return absl::StrCat(std::get<0>(info.param), "_world", std::get<1>(info.param));
}

const auto kSizes = ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{1000}, LargestMessage());

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(ConformingBackends()), ::testing::Values(1, 2, 3, 4, 8),
                                            kSizes),
                         SizedName);
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorPointToPointTest,
                         ::testing::Combine(::testing::ValuesIn(ConformingBackends()), ::testing::Values(2, 3, 4, 8),
                                            kSizes),
                         SizedName);
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorWorldTest,
                         ::testing::Combine(::testing::ValuesIn(ConformingBackends()),
                                            ::testing::Values(1, 2, 3, 4, 8)),
                         WorldName);
INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorFaultTest, ::testing::ValuesIn(ConformingBackends()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace nereid
