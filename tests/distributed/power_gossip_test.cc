// PowerGossip (the power_gossip pass) end to end: real `nereid` worker
// processes over loopback TCP, on the ring. Each edge's two ends apply the
// same rank-1 approximation with opposite signs, so the ranks' average moves
// exactly as the average of their local steps: after one step the averaged
// model is data parallelism's. Over an epoch the ranks stay close, the
// averaged model trains as data parallelism's, and the messages are a small
// fraction of gossip's whole-model pushes.

#include <string>

#include "absl/strings/str_cat.h"
#include "core/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/run_metrics.h"
#include "tests/process_util.h"

namespace nereid {
namespace {

using ::nereid::testing::Outcome;
using ::nereid::testing::ReadFile;
using ::nereid::testing::Shell;
using ::testing::HasSubstr;

constexpr char kNereid[] = "runtime/cli/nereid";

class PowerGossipTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // testing::RunMlpWorkers, each run's metrics in the test's directory.
  Json Run(int workers, int steps, const std::string& passes, const std::string& more = "") {
    return testing::RunMlpWorkers(absl::StrCat(dir_, "/", ++runs_, ".json"), workers, steps, passes, more);
  }

  std::string dir_;
  int runs_ = 0;
};

// After one step every rank holds its own local step moved towards its
// neighbours; the moves cancel over the ranks, so the average (what the
// final evaluation scores) is the allreduce step's model: the same test loss.
// (960 test images: every rank scores as many, with 3 ranks as with 4.)
TEST_F(PowerGossipTest, TheAverageMovesAsTheLocalStepsAverage) {
  for (int workers : {3, 4}) {
    SCOPED_TRACE(workers);
    Json allreduce = Run(workers, 1, "autodiff,data_parallel,sgd(lr=0.05,momentum=0.9)", " --test-limit 960");
    Json power = Run(workers, 1, "autodiff,sgd(lr=0.05,momentum=0.9),power_gossip", " --test-limit 960");
    ASSERT_FALSE(allreduce.is_null());
    ASSERT_FALSE(power.is_null());
    EXPECT_EQ(power["strategy"].get<std::string>(), "gossip");
    const double a = allreduce["per_epoch"][0]["test_loss"].get<double>();
    const double p = power["per_epoch"][0]["test_loss"].get<double>();
    EXPECT_NEAR(p, a, 1e-5 * a);
    // The ranks did differ and were moved: not every rank holds the average.
    EXPECT_GT(power["per_epoch"][0]["consensus_distance"].get<double>(), 0);
  }
}

TEST_F(PowerGossipTest, SendsAFractionOfGossipsBytesAndStaysClose) {
  Json allreduce = Run(4, 64, "autodiff,data_parallel,sgd(lr=0.05)");
  // Only the ring's bytes per training step are read: 8 steps tell them.
  Json ring = Run(4, 8, "autodiff,sgd(lr=0.05),gossip(topology=ring)");
  Json power = Run(4, 64, "autodiff,sgd(lr=0.05),power_gossip");
  ASSERT_FALSE(allreduce.is_null());
  ASSERT_FALSE(ring.is_null());
  ASSERT_FALSE(power.is_null());
  // mlp's matrices are 784x512, 512x512 and 512x10: rows + columns floats per
  // edge and round against rows x columns per push.
  EXPECT_LT(power["bytes_sent_per_step"].get<double>(), ring["bytes_sent_per_step"].get<double>() / 50);
  EXPECT_DOUBLE_EQ(power["push_sum_weight_total"].get<double>(), 4.0);
  const double consensus = power["per_epoch"][0]["consensus_distance"].get<double>();
  EXPECT_GT(consensus, 0);
  EXPECT_LT(consensus, 3e-2);
  EXPECT_NEAR(power["final_test_accuracy"].get<double>(), allreduce["final_test_accuracy"].get<double>(), 0.03);
}

TEST_F(PowerGossipTest, ARingNeedsThreeRanksAndOneGossip) {
  Outcome two = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 2 --passes "
                                            "\"autodiff,sgd(lr=0.05),power_gossip\" -o ",
                                   dir_, "/plan.pbtxt"));
  EXPECT_NE(two.exit_code, 0);
  EXPECT_THAT(two.output, HasSubstr("power_gossip: the ring needs at least 3 workers"));
  Outcome twice = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 4 --passes "
                                              "\"autodiff,sgd(lr=0.05),gossip,power_gossip\" -o ",
                                     dir_, "/plan.pbtxt"));
  EXPECT_NE(twice.exit_code, 0);
  EXPECT_THAT(twice.output, HasSubstr("power_gossip: the plan already gossips"));
}

}  // namespace
}  // namespace nereid
