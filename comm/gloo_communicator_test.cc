// Gloo collectives over loopback TCP, ranks as threads: every operation for
// world sizes 1..8 and sizes {0, 1, 7, 1000, 65539} elements, checking exact
// values (integer-valued floats, so sums are exact) and the traffic counters
// against the formulas. One world per size is connected once and reused.

#include <atomic>
#include <cmath>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "comm/communicator.h"
#include "comm/gloo_test_world.h"
#include "comm/traffic_accounting.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::AllOk;
using ::nereid::testing::ConnectWorld;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;

constexpr int64_t kFloat = sizeof(float);

// Integer-valued and small: any sum of up to 8 of them is exact in float.
float Value(int rank, size_t i) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1024)); }

float SumOverRanks(int world, size_t i) {
  float sum = 0;
  for (int r = 0; r < world; ++r) sum += Value(r, i);
  return sum;
}

// What the communicator computes for kAvg: the sum times 1/world.
float AvgOverRanks(int world, size_t i) { return SumOverRanks(world, i) * (1.0f / static_cast<float>(world)); }

CollectiveOptions Options(uint32_t tag) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = absl::Seconds(30);
  return o;
}

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status ExpectValues(int rank, const std::vector<float>& got, const std::function<float(size_t)>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      return absl::InternalError(absl::StrCat("rank ", rank, " element ", i, ": got ", got[i], ", want ", want(i)));
    }
  }
  return absl::OkStatus();
}

absl::Status ExpectTraffic(int rank, const TrafficCounters& before, const TrafficCounters& after,
                           TrafficBytes want) {
  const int64_t sent = after.bytes_sent - before.bytes_sent;
  const int64_t received = after.bytes_received - before.bytes_received;
  const int64_t calls = after.calls - before.calls;
  if (sent != want.sent || received != want.received || calls != 1) {
    return absl::InternalError(absl::StrCat("rank ", rank, " traffic: sent ", sent, " received ", received, " calls ",
                                            calls, "; want ", want.sent, " / ", want.received, " / 1"));
  }
  return absl::OkStatus();
}

// One connected world per size, shared by every test and dropped at exit.
class WorldCache : public ::testing::Environment {
 public:
  static std::vector<std::unique_ptr<Communicator>>& Get(int world) {
    std::vector<std::unique_ptr<Communicator>>& w = worlds()[world];
    if (w.empty()) {
      auto connected = ConnectWorld(LocalFileSpec(absl::StrCat("collectives-", world)), world, absl::Seconds(30));
      EXPECT_TRUE(connected.ok()) << connected.status();
      if (connected.ok()) w = std::move(*connected);
    }
    return w;
  }
  void TearDown() override { worlds().clear(); }

 private:
  static std::map<int, std::vector<std::unique_ptr<Communicator>>>& worlds() {
    static auto* w = new std::map<int, std::vector<std::unique_ptr<Communicator>>>;
    return *w;
  }
};

const ::testing::Environment* const kWorldCache = ::testing::AddGlobalTestEnvironment(new WorldCache);

// Runs fn(rank, communicator) on every rank of the cached world at once.
absl::Status OnRanks(int world, const std::function<absl::Status(int, Communicator&)>& fn) {
  std::vector<std::unique_ptr<Communicator>>& w = WorldCache::Get(world);
  if (static_cast<int>(w.size()) != world) return absl::InternalError("world not connected");
  return AllOk(RunOnRanks(world, [&](int r) { return fn(r, *w[r]); }));
}

// Parameters: world size, elements.
class GlooCollectivesTest : public ::testing::TestWithParam<std::tuple<int, size_t>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  size_t size() const { return std::get<1>(GetParam()); }
  absl::Status OnRanks(const std::function<absl::Status(int, Communicator&)>& fn) { return nereid::OnRanks(n(), fn); }
};

// Same parameters, worlds of two or more.
class GlooSendRecvTest : public GlooCollectivesTest {
 protected:
  // Every rank sends its values to its right neighbour and receives its left
  // neighbour's, by `exchange(mine, right, theirs, left)`; checks what
  // arrived, and that it moved `size()` floats each way in `calls` calls.
  using Exchange =
      std::function<absl::Status(Communicator&, const std::vector<float>&, int, absl::Span<float>, int, int rank)>;
  void ExpectRingShift(int calls, const Exchange& exchange) {
    const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
      const int right = (r + 1) % n();
      const int left = (r + n() - 1) % n();
      std::vector<float> mine(size());
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = Value(r, i);
      std::vector<float> theirs(size(), -1.0f);
      const TrafficCounters before = c.traffic();
      RETURN_IF_ERROR(exchange(c, mine, right, absl::MakeSpan(theirs), left, r));
      RETURN_IF_ERROR(ExpectValues(r, theirs, [&](size_t i) { return Value(left, i); }));
      const TrafficCounters after = c.traffic();
      const int64_t bytes = static_cast<int64_t>(size()) * kFloat;
      return Expect(after.bytes_sent - before.bytes_sent == bytes &&
                        after.bytes_received - before.bytes_received == bytes && after.calls - before.calls == calls,
                    absl::StrCat("rank ", r, " traffic wrong"));
    });
    EXPECT_TRUE(status.ok()) << status;
  }
};

// Parameter: world size.
class GlooBarrierTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, AllReduceSum) {
  const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
    std::vector<float> data(size());
    for (size_t i = 0; i < data.size(); ++i) data[i] = Value(r, i);
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(1)));
    RETURN_IF_ERROR(ExpectValues(r, data, [&](size_t i) { return SumOverRanks(n(), i); }));
    return ExpectTraffic(r, before, c.traffic(), RingAllReduceTraffic(n(), size() * kFloat));
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(GlooCollectivesTest, AllReduceAvg) {
  const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
    std::vector<float> data(size());
    for (size_t i = 0; i < data.size(); ++i) data[i] = Value(r, i);
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(data), ReduceOp::kAvg, Options(2)));
    RETURN_IF_ERROR(ExpectValues(r, data, [&](size_t i) { return AvgOverRanks(n(), i); }));
    return ExpectTraffic(r, before, c.traffic(), RingAllReduceTraffic(n(), size() * kFloat));
  });
  EXPECT_TRUE(status.ok()) << status;
}

// 16-bit wire formats: every rank ends bitwise equal; each element is within
// the rounding the ring allows (a partial sum is rounded before each of its
// n-1 hops and once more by its owner: at most n half-ulps of the sum of
// magnitudes); the wire really is 16-bit (values with more mantissa bits than
// fp16 keeps do come back rounded); half the bytes of float32.
TEST_P(GlooCollectivesTest, AllReduceWith16BitWire) {
  for (WireType wire : {WireType::kFloat16, WireType::kBFloat16}) {
    const float half_ulp = wire == WireType::kFloat16 ? 0x1p-11f : 0x1p-8f;
    auto value = [](int r, size_t i) { return 1.0f + 0.001f * static_cast<float>(r) + 1e-6f * static_cast<float>(i % 997); };
    std::vector<std::vector<float>> results(n());
    const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
      std::vector<float> data(size());
      for (size_t i = 0; i < data.size(); ++i) data[i] = value(r, i);
      const TrafficCounters before = c.traffic();
      CollectiveOptions options = Options(3);
      options.wire = wire;
      RETURN_IF_ERROR(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options));
      results[r] = data;
      const int64_t wire_bytes = n() == 1 ? 0 : static_cast<int64_t>(size()) * 2;
      return n() == 1 ? absl::OkStatus() : ExpectTraffic(r, before, c.traffic(), RingAllReduceTraffic(n(), wire_bytes));
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
      EXPECT_TRUE(rounded) << WireTypeName(wire) << ": nothing was rounded";
    }
  }
}

// Input: world * size elements; rank r ends with the reduction of chunk r.
TEST_P(GlooCollectivesTest, ReduceScatter) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
      std::vector<float> data(size() * n());
      for (size_t i = 0; i < data.size(); ++i) data[i] = Value(r, i);
      std::vector<float> out(size(), -1.0f);
      const TrafficCounters before = c.traffic();
      RETURN_IF_ERROR(c.ReduceScatter(data, absl::MakeSpan(out), op, Options(3)));
      RETURN_IF_ERROR(ExpectValues(r, out, [&](size_t i) {
        const size_t global = r * size() + i;
        return op == ReduceOp::kSum ? SumOverRanks(n(), global) : AvgOverRanks(n(), global);
      }));
      return ExpectTraffic(r, before, c.traffic(), RingReduceScatterTraffic(n(), data.size() * kFloat));
    });
    EXPECT_TRUE(status.ok()) << (op == ReduceOp::kSum ? "sum: " : "avg: ") << status;
  }
}

TEST_P(GlooCollectivesTest, AllGather) {
  const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
    std::vector<float> in(size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = Value(r, i);
    std::vector<float> out(size() * n(), -1.0f);
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.AllGather(in, absl::MakeSpan(out), Options(4)));
    RETURN_IF_ERROR(ExpectValues(r, out, [&](size_t i) { return Value(static_cast<int>(i / size()), i % size()); }));
    return ExpectTraffic(r, before, c.traffic(), RingAllGatherTraffic(n(), out.size() * kFloat));
  });
  EXPECT_TRUE(status.ok()) << status;
}

// From every root in worlds up to 4, from the first and last rank above.
TEST_P(GlooCollectivesTest, Broadcast) {
  std::vector<int> roots;
  for (int root = 0; root < n(); ++root) {
    if (n() <= 4 || root == 0 || root == n() - 1) roots.push_back(root);
  }
  for (int root : roots) {
    std::vector<int64_t> sent(n(), 0);
    const absl::Status status = OnRanks([&](int r, Communicator& c) -> absl::Status {
      std::vector<float> data(size());
      for (size_t i = 0; i < data.size(); ++i) data[i] = r == root ? Value(r, i) : -1.0f;
      const TrafficCounters before = c.traffic();
      RETURN_IF_ERROR(c.Broadcast(absl::MakeSpan(data), root, Options(5)));
      RETURN_IF_ERROR(ExpectValues(r, data, [&](size_t i) { return Value(root, i); }));
      const TrafficCounters after = c.traffic();
      sent[r] = after.bytes_sent - before.bytes_sent;
      RETURN_IF_ERROR(Expect(after.bytes_received - before.bytes_received ==
                                 (r == root || n() == 1 ? 0 : static_cast<int64_t>(size()) * kFloat),
                             absl::StrCat("rank ", r, " received the wrong byte count")));
      return ExpectTraffic(r, before, after, BinomialBroadcastTraffic(n(), r, root, size() * kFloat));
    });
    EXPECT_TRUE(status.ok()) << "root " << root << ": " << status;
    int64_t total = 0;
    for (int64_t s : sent) total += s;
    // One copy of the data for every rank but the root, whatever the tree.
    EXPECT_EQ(total, static_cast<int64_t>(size()) * kFloat * (n() - 1)) << "root " << root;
  }
}

// Each rank sends to its right neighbour and receives from its left. Send
// waits for the matching Recv, so even ranks send first and odd ranks
// receive first.
TEST_P(GlooSendRecvTest, Ring) {
  ExpectRingShift(2, [](Communicator& c, const std::vector<float>& mine, int right, absl::Span<float> theirs, int left,
                        int r) -> absl::Status {
    if (r % 2 == 0) {
      RETURN_IF_ERROR(c.Send(mine, right, Options(6)));
      return c.Recv(theirs, left, Options(6));
    }
    RETURN_IF_ERROR(c.Recv(theirs, left, Options(6)));
    return c.Send(mine, right, Options(6));
  });
}

// SendRecv: every rank sends to its right neighbour and receives from its
// left at once (all "send first"), which Send and Recv alone would deadlock.
TEST_P(GlooSendRecvTest, ShiftWhereEveryRankSendsFirst) {
  ExpectRingShift(1, [](Communicator& c, const std::vector<float>& mine, int right, absl::Span<float> theirs, int left,
                        int) { return c.SendRecv(mine, right, theirs, left, Options(8)); });
}

// Nobody leaves the barrier before everybody has entered it.
TEST_P(GlooBarrierTest, WaitsForEveryone) {
  const int n = GetParam();
  std::atomic<int> entered{0};
  const absl::Status status = OnRanks(n, [&](int r, Communicator& c) -> absl::Status {
    // Late ranks make the test meaningful: rank r enters after r * 20 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));
    entered.fetch_add(1);
    const TrafficCounters before = c.traffic();
    RETURN_IF_ERROR(c.Barrier(Options(7)));
    RETURN_IF_ERROR(Expect(entered.load() == n, absl::StrCat("rank ", r, " left the barrier early")));
    return ExpectTraffic(r, before, c.traffic(), {0, 0});
  });
  EXPECT_TRUE(status.ok()) << status;
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<int, size_t>>& info) {
  return absl::StrCat("world", std::get<0>(info.param), "_size", std::get<1>(info.param));
}

const auto kSizes = ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{(1 << 16) + 3});

INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, GlooCollectivesTest, ::testing::Combine(::testing::Range(1, 9), kSizes),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, GlooSendRecvTest, ::testing::Combine(::testing::Range(2, 9), kSizes),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(Worlds, GlooBarrierTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat("world", info.param); });

// Calls with distinct tags from several threads of each rank at once.
TEST(GlooConcurrencyTest, DistinctTagsFromManyThreads) {
  constexpr int kWorld = 3;
  constexpr int kThreadsPerRank = 3;
  constexpr int kRounds = 10;
  auto comms = ConnectWorld(LocalFileSpec("concurrency"), kWorld, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const absl::Status status = AllOk(RunOnRanks(kWorld, [&](int r) -> absl::Status {
    return AllOk(RunOnRanks(kThreadsPerRank, [&](int t) -> absl::Status {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<float> data(1000 + 17 * t);
        for (size_t i = 0; i < data.size(); ++i) data[i] = Value(r, i + t);
        RETURN_IF_ERROR((*comms)[r]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(100 + t)));
        RETURN_IF_ERROR(ExpectValues(r, data, [&](size_t i) { return SumOverRanks(kWorld, i + t); }));
      }
      return absl::OkStatus();
    }));
  }));
  EXPECT_TRUE(status.ok()) << status;
  for (const auto& c : *comms) EXPECT_EQ(c->traffic().calls, kThreadsPerRank * kRounds);
}

TEST(GlooArgumentsTest, RejectsBadArguments) {
  auto comms = ConnectWorld(LocalFileSpec("arguments"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  Communicator& c = *(*comms)[0];
  EXPECT_EQ(c.backend(), "gloo/tcp");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.world(), 2);
  std::vector<float> a(4), b(3);
  EXPECT_EQ(c.ReduceScatter(a, absl::MakeSpan(b), ReduceOp::kSum, Options(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllGather(b, absl::MakeSpan(a), Options(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Broadcast(absl::MakeSpan(a), 2, Options(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Broadcast(absl::MakeSpan(a), -1, Options(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Send(a, 0, Options(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Recv(absl::MakeSpan(a), 5, Options(1)).code(), absl::StatusCode::kInvalidArgument);
  CollectiveOptions zero = Options(1);
  zero.timeout = absl::ZeroDuration();
  const absl::Status status = c.AllReduce(absl::MakeSpan(a), ReduceOp::kSum, zero);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("timeout must be positive"), std::string::npos) << status;
  EXPECT_EQ(c.traffic().calls, 0);
}

}  // namespace
}  // namespace nereid
