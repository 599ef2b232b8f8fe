#include "comm/traffic_accounting.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(TrafficAccountingTest, RingFormulas) {
  // 2(n-1)/n * S each way.
  EXPECT_EQ(RingAllReduceTraffic(4, 4000).sent, 6000);
  EXPECT_EQ(RingAllReduceTraffic(4, 4000).received, 6000);
  EXPECT_EQ(RingAllReduceTraffic(2, 4).sent, 4);
  EXPECT_EQ(RingAllReduceTraffic(3, 4).sent, 5);  // 16/3 rounded down
  // (n-1)/n of the total.
  EXPECT_EQ(RingAllGatherTraffic(4, 4000).sent, 3000);
  EXPECT_EQ(RingAllGatherTraffic(4, 4000).received, 3000);
  EXPECT_EQ(RingReduceScatterTraffic(8, 800).sent, 700);
  EXPECT_EQ(RingReduceScatterTraffic(8, 800).received, 700);
}

TEST(TrafficAccountingTest, NothingMovesForOneRankOrZeroBytes) {
  EXPECT_EQ(RingAllReduceTraffic(1, 4000).sent, 0);
  EXPECT_EQ(RingAllReduceTraffic(4, 0).sent, 0);
  EXPECT_EQ(RingAllGatherTraffic(1, 4000).received, 0);
  EXPECT_EQ(RingReduceScatterTraffic(1, 4000).received, 0);
  EXPECT_EQ(BinomialBroadcastTraffic(1, 0, 0, 4000).sent, 0);
  EXPECT_EQ(BinomialBroadcastTraffic(4, 1, 0, 0).received, 0);
}

TEST(TrafficAccountingTest, BinomialTreeChildren) {
  // World 8, root 0: 0 -> {1, 2, 4}, 1 -> {3, 5}, 2 -> {6}, 3 -> {7}.
  const std::vector<int> want = {3, 2, 1, 1, 0, 0, 0, 0};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(BinomialBroadcastChildren(8, r, 0), want[r]) << "rank " << r;
  // Rooted elsewhere the tree is rotated.
  EXPECT_EQ(BinomialBroadcastChildren(8, 5, 5), 3);
  EXPECT_EQ(BinomialBroadcastChildren(8, 6, 5), 2);
  EXPECT_EQ(BinomialBroadcastChildren(8, 4, 5), 0);
}

// Whatever the shape, the tree delivers one copy to every non-root rank.
TEST(TrafficAccountingTest, BroadcastSendsOneCopyPerReceiver) {
  for (int world = 1; world <= 16; ++world) {
    for (int root = 0; root < world; ++root) {
      int64_t sent = 0, received = 0;
      for (int r = 0; r < world; ++r) {
        const TrafficBytes t = BinomialBroadcastTraffic(world, r, root, 10);
        sent += t.sent;
        received += t.received;
        EXPECT_EQ(t.received, r == root ? 0 : 10);
      }
      EXPECT_EQ(sent, 10 * (world - 1)) << "world " << world << " root " << root;
      EXPECT_EQ(received, sent);
    }
  }
}

TEST(TrafficAccountingTest, MeterSumsFromManyThreads) {
  TrafficMeter meter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) meter.RecordCall({3, 5});
    });
  }
  for (auto& t : threads) t.join();
  meter.RecordCall();
  const TrafficCounters c = meter.Snapshot();
  EXPECT_EQ(c.bytes_sent, 12000);
  EXPECT_EQ(c.bytes_received, 20000);
  EXPECT_EQ(c.calls, 4001);
}

}  // namespace
}  // namespace nereid
