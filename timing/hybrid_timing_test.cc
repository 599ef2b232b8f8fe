#include "timing/hybrid_timing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// One pair of 1000-wide layers on 4 workers in one group, batch 10, a link of
// 1 ms latency and 1 MB/s: every term by hand.
HybridInputs Example() {
  HybridInputs in;
  in.workers = 4;
  in.group_size = 4;
  in.batch_per_worker = 10;
  in.compute_seconds = 0.5;
  in.replicated_gradient_bytes = 1000000;
  in.sharded_gradient_bytes = 8000000;
  in.exchanges = {{GroupExchange::kAllGather, 100}, {GroupExchange::kReduceScatter, 1000}, {GroupExchange::kAllGather, 1000}};  // gather x, reduce-scatter y, gather dy
  in.link.alpha_seconds = 1e-3;
  in.link.beta_bytes_per_second = 1e6;
  return in;
}

TEST(HybridTimingTest, TermsAsTheHeaderWritesThem) {
  absl::StatusOr<HybridTime> t = PredictHybrid(Example());
  ASSERT_TRUE(t.ok()) << t.status();
  // Data parallel: ring of 9 MB over 4: 6 * (1 ms + 9e6 / 4 / 1e6 s).
  EXPECT_NEAR(t->data_parallel_seconds, 0.5 + 6 * (1e-3 + 2.25), 1e-9);
  // Exchanges: 3 steps each of 4 * 10 * e bytes: e = 100, 1000, 1000.
  double exchanges = 3 * (1e-3 + 4000e-6) + 2 * 3 * (1e-3 + 40000e-6);
  EXPECT_NEAR(t->exchange_seconds, exchanges, 1e-9);
  // The replicated 1 MB over 4; no replicas of the shards (one group).
  EXPECT_NEAR(t->hybrid_allreduce_seconds, 6 * (1e-3 + 0.25), 1e-9);
  EXPECT_NEAR(t->hybrid_seconds, 0.5 + exchanges + 6 * (1e-3 + 0.25), 1e-9);
  EXPECT_NEAR(t->speedup, t->data_parallel_seconds / t->hybrid_seconds, 1e-12);
  EXPECT_NEAR(t->data_parallel_bytes_sent, 1.5 * 9e6, 1e-6);
  EXPECT_NEAR(t->hybrid_bytes_sent, 3 * 4000 + 2 * 3 * 40000 + 1.5 * 1e6, 1e-6);
}

// Tensor parallel: an allreduce of the group's one batch of 1000-wide rows
// is a ring over the 4 ranks: 2 * 3 steps of 4 * 10 * 1000 / 4 bytes.
TEST(HybridTimingTest, TensorParallelAllReduceIsARingOverTheGroup) {
  HybridInputs in = Example();
  in.exchanges = {{GroupExchange::kAllReduce, 1000}};
  absl::StatusOr<HybridTime> t = PredictHybrid(in);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(t->exchange_seconds, 6 * (1e-3 + 10000e-6), 1e-9);
  EXPECT_NEAR(t->hybrid_bytes_sent, 6 * 10000 + 1.5 * 1e6, 1e-6);
}

TEST(HybridTimingTest, ShardsAreAveragedOverTheirReplicas) {
  HybridInputs in = Example();
  in.group_size = 2;
  absl::StatusOr<HybridTime> t = PredictHybrid(in);
  ASSERT_TRUE(t.ok());
  // The 8 MB of shards, 4 MB per rank, over the 2 ranks holding each.
  double replicas = 2 * (1e-3 + 4e6 / 2 / 1e6);
  EXPECT_NEAR(t->hybrid_allreduce_seconds, 6 * (1e-3 + 0.25) + replicas, 1e-9);
}

TEST(HybridTimingTest, ExtrapolatesWithOneGroupOfAllWorkers) {
  absl::StatusOr<HybridTime> small = PredictHybridAt(Example(), 8, 10);
  absl::StatusOr<HybridTime> large = PredictHybridAt(Example(), 64, 10);
  ASSERT_TRUE(small.ok() && large.ok());
  // The ring's bytes per worker hardly grow; the exchanges' grow with G.
  EXPECT_GT(large->exchange_seconds, small->exchange_seconds);
  EXPECT_GT(large->data_parallel_seconds, small->data_parallel_seconds);
}

TEST(HybridTimingTest, RefusesWhatDoesNotFit) {
  HybridInputs in = Example();
  in.group_size = 3;
  EXPECT_THAT(std::string(PredictHybrid(in).status().message()), HasSubstr("divide the 4 workers"));
  in = Example();
  in.compute_seconds = 0;
  EXPECT_FALSE(PredictHybrid(in).ok());
  in = Example();
  in.link.beta_bytes_per_second = 0;
  EXPECT_FALSE(PredictHybrid(in).ok());
}

}  // namespace
}  // namespace nereid
