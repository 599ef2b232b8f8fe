// Stochastic Gradient Push (the gossip pass) end to end: real `nereid`
// worker processes over loopback TCP. With two ranks one push-sum step is the
// allreduce average, so the losses are data parallelism's; with four, on the
// exponential graph and on the ring, push-sum conserves its weights, the
// ranks' models stay close to their average, and the averaged final model
// trains as data parallelism's does.

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

class GossipTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // testing::RunMlpWorkers, each run's metrics in the test's directory. Runs
  // are deterministic, so a run several tests compare against (allreduce's,
  // plain gossip's) is made once per test binary.
  Json Run(int workers, int steps, const std::string& passes, const std::string& more = "") {
    static auto* made = new std::map<std::string, Json>();
    const std::string key = absl::StrCat(workers, "/", steps, "/", passes, "/", more);
    if (auto it = made->find(key); it != made->end()) return it->second;
    Json metrics = testing::RunMlpWorkers(absl::StrCat(dir_, "/", ++runs_, ".json"), workers, steps, passes, more);
    if (!metrics.is_null()) (*made)[key] = metrics;
    return metrics;
  }

  // `gossip` (the passes after autodiff) against data parallelism on the
  // same ranks and steps: the same losses within 1e-5 (each step is the
  // allreduce average) and a mass of `workers`. Returns gossip's metrics.
  Json ExpectTheAllreduceAverage(int workers, int steps, const std::string& gossip) {
    Json mixed = Run(workers, steps, "autodiff," + gossip);
    Json allreduce = Run(workers, steps, "autodiff,data_parallel,sgd(lr=0.05)");
    EXPECT_FALSE(mixed.is_null());
    EXPECT_FALSE(allreduce.is_null());
    if (mixed.is_null() || allreduce.is_null()) return Json();
    std::vector<double> a = mixed["step_losses"].get<std::vector<double>>();
    std::vector<double> b = allreduce["step_losses"].get<std::vector<double>>();
    EXPECT_EQ(a.size(), static_cast<size_t>(steps));
    EXPECT_EQ(b.size(), static_cast<size_t>(steps));
    EXPECT_LE(testing::WorstRelativeDifference(a, b), 1e-5);
    EXPECT_DOUBLE_EQ(mixed["push_sum_weight_total"].get<double>(), workers);
    return mixed;
  }

  std::string dir_;
  int runs_ = 0;
};

TEST_F(GossipTest, TwoRanksMixToTheAllreduceAverage) {
  Json gossip = ExpectTheAllreduceAverage(2, 20, "sgd(lr=0.05),gossip");
  ASSERT_FALSE(gossip.is_null());
  EXPECT_EQ(gossip["strategy"].get<std::string>(), "gossip");
}

// On the complete graph every step averages all ranks' models: allreduce's
// arithmetic, up to the order of the sums.
TEST_F(GossipTest, TheCompleteGraphGivesTheAllreduceAverage) {
  Json gossip = ExpectTheAllreduceAverage(4, 12, "sgd(lr=0.05),gossip(topology=complete)");
  ASSERT_FALSE(gossip.is_null());
  EXPECT_LT(gossip["per_epoch"][0]["consensus_distance"].get<double>(), 1e-6);
}

// The linear graph's n-1 offsets: with n-1 peers every rank hears from every
// other each step, so one step is the allreduce average.
TEST_F(GossipTest, TheLinearGraphWithEveryPeerGivesTheAllreduceAverage) {
  ExpectTheAllreduceAverage(4, 12, "sgd(lr=0.05),gossip(topology=linear,peers=3)");
}

TEST_F(GossipTest, FourRanksConserveWeightAndStayClose) {
  Json allreduce = Run(4, 64, "autodiff,data_parallel,sgd(lr=0.05)");
  ASSERT_FALSE(allreduce.is_null());
  for (const char* topology : {"exponential", "ring", "linear"}) {
    SCOPED_TRACE(topology);
    Json gossip = Run(4, 64, absl::StrCat("autodiff,sgd(lr=0.05),gossip(topology=", topology, ")"));
    ASSERT_FALSE(gossip.is_null());
    EXPECT_DOUBLE_EQ(gossip["push_sum_weight_total"].get<double>(), 4.0);
    const double consensus = gossip["per_epoch"][0]["consensus_distance"].get<double>();
    EXPECT_GT(consensus, 0);  // the ranks' models do differ
    EXPECT_LT(consensus, 1e-2);
    // The averaged final model, against allreduce's.
    EXPECT_NEAR(gossip["final_test_accuracy"].get<double>(), allreduce["final_test_accuracy"].get<double>(), 0.03);
  }
}

// Several peers per step: on 3 ranks, 2 peers reach every other rank, so one
// step is the allreduce average; on 4 ranks, 2 peers mix faster than one.
TEST_F(GossipTest, TwoPeersOnThreeRanksGiveTheAllreduceAverage) {
  ExpectTheAllreduceAverage(3, 12, "sgd(lr=0.05),gossip(peers=2)");
}

TEST_F(GossipTest, TwoPeersOnFourRanksMixCloser) {
  Json one = Run(4, 64, "autodiff,sgd(lr=0.05),gossip");
  Json two = Run(4, 64, "autodiff,sgd(lr=0.05),gossip(peers=2)");
  ASSERT_FALSE(one.is_null());
  ASSERT_FALSE(two.is_null());
  EXPECT_DOUBLE_EQ(two["push_sum_weight_total"].get<double>(), 4.0);
  const double c1 = one["per_epoch"][0]["consensus_distance"].get<double>();
  const double c2 = two["per_epoch"][0]["consensus_distance"].get<double>();
  EXPECT_GT(c2, 0);
  EXPECT_LT(c2, c1);
}

// Overlap SGP: pushes are mixed in tau steps later, tau+1 steps in flight.
// Push-sum's mass (the weights plus the weight in flight) stays the world
// size; the ranks' de-biased models stay close; the averaged model trains as
// data parallelism's does.
TEST_F(GossipTest, OverlapConservesMassAndTrains) {
  Json allreduce = Run(4, 64, "autodiff,data_parallel,sgd(lr=0.05)");
  Json plain = Run(4, 64, "autodiff,sgd(lr=0.05),gossip");
  ASSERT_FALSE(allreduce.is_null());
  ASSERT_FALSE(plain.is_null());
  for (const char* passes : {"autodiff,sgd(lr=0.05),gossip(overlap=1)",
                             "autodiff,sgd(lr=0.05,momentum=0.9,nesterov=true),gossip(topology=ring,overlap=2)"}) {
    SCOPED_TRACE(passes);
    Json gossip = Run(4, 64, passes);
    ASSERT_FALSE(gossip.is_null());
    EXPECT_NEAR(gossip["push_sum_weight_total"].get<double>(), 4.0, 1e-5);
    const double consensus = gossip["per_epoch"][0]["consensus_distance"].get<double>();
    EXPECT_GT(consensus, 0);
    EXPECT_LT(consensus, 2e-2);
    EXPECT_NEAR(gossip["final_test_accuracy"].get<double>(), allreduce["final_test_accuracy"].get<double>(), 0.04);
    // The delayed mixing is other arithmetic than plain SGP's.
    EXPECT_GT(testing::WorstRelativeDifference(gossip["step_losses"].get<std::vector<double>>(),
                                               plain["step_losses"].get<std::vector<double>>()),
              1e-4);
  }
  Json two = Run(2, 20, "autodiff,sgd(lr=0.05),gossip(overlap=1)");
  ASSERT_FALSE(two.is_null());
  EXPECT_NEAR(two["push_sum_weight_total"].get<double>(), 2.0, 1e-6);
}

// Compressed pushes against float32 ones, the same 48 steps on 4 ranks:
// compress(fp16) halves the bytes, each sender keeping what rounding takes
// off its share; compress(powersgd) sends rank-2 codes of each matrix's
// change against the edge's reference, the sender keeping what a code leaves
// out (under a tenth of the bytes: each edge's first push is exact). Either
// way the weights' mass stays the world size, the ranks stay close (the
// low-rank ones less so) and the averaged model trains as with float32.
TEST_F(GossipTest, CompressedPushesCutTheBytesAndKeepTheMass) {
  Json full = Run(4, 48, "autodiff,sgd(lr=0.05),gossip(overlap=1)");
  ASSERT_FALSE(full.is_null());
  struct Case {
    std::string method;
    double consensus_below, accuracy_within, bytes_ratio_from, bytes_ratio_to;
  };
  for (const Case& c : {Case{"fp16", 2e-2, 0.03, 0.49, 0.51}, Case{"powersgd", 0.2, 0.04, 0.0, 0.1}}) {
    SCOPED_TRACE(c.method);
    Json coded = Run(4, 48, "autodiff,sgd(lr=0.05),gossip(overlap=1),compress(method=" + c.method + ")");
    ASSERT_FALSE(coded.is_null());
    EXPECT_NEAR(coded["push_sum_weight_total"].get<double>(), 4.0, 1e-5);
    const double consensus = coded["per_epoch"][0]["consensus_distance"].get<double>();
    EXPECT_GT(consensus, 0);
    EXPECT_LT(consensus, c.consensus_below);
    EXPECT_NEAR(coded["final_test_accuracy"].get<double>(), full["final_test_accuracy"].get<double>(),
                c.accuracy_within);
    const double ratio = coded["bytes_sent_per_step"].get<double>() / full["bytes_sent_per_step"].get<double>();
    EXPECT_GT(ratio, c.bytes_ratio_from);
    EXPECT_LT(ratio, c.bytes_ratio_to);
    // Coded pushes are other arithmetic than float32's.
    EXPECT_GT(testing::WorstRelativeDifference(coded["step_losses"].get<std::vector<double>>(),
                                               full["step_losses"].get<std::vector<double>>()),
              0);
  }
}

TEST_F(GossipTest, CodesThatCannotKeepTheMassAreRefused) {
  for (const auto& [passes, refusal] :
       std::vector<std::pair<std::string, std::string>>{
           {"gossip,compress(method=qsgd)", "gossip's pushes take fp16, bf16 or powersgd"},
           {"gossip(topology=complete),compress(method=powersgd)", "gossip on the complete graph is an allreduce"},
           {"gossip,compress(method=powersgd,rank=0)", "takes rank=R (R >= 1)"}}) {
    Outcome o = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 4 --passes \"autodiff,sgd(lr=0.05),",
                                   passes, "\" -o ", dir_, "/plan.pbtxt"));
    EXPECT_NE(o.exit_code, 0) << passes;
    EXPECT_THAT(o.output, HasSubstr(refusal)) << passes;
  }
}

// --gossip-eval average scores the ranks' average after every epoch, and
// each rank goes on from its own model: the same training, bit for bit, as
// scoring each rank's own model; only the earlier epochs' scores differ.
TEST_F(GossipTest, ScoringTheAverageEveryEpochChangesNoTraining) {
  const std::string passes = "autodiff,sgd(lr=0.05),gossip(overlap=1)";
  Json ranks = Run(4, 8, passes, " --epochs 2");
  Json average = Run(4, 8, passes, " --epochs 2 --gossip-eval average");
  ASSERT_FALSE(ranks.is_null());
  ASSERT_FALSE(average.is_null());
  EXPECT_EQ(average["step_losses"].get<std::vector<double>>(), ranks["step_losses"].get<std::vector<double>>());
  // The second epoch starts from each rank's own state: its models are as far apart.
  EXPECT_EQ(average["per_epoch"][1]["consensus_distance"].get<double>(),
            ranks["per_epoch"][1]["consensus_distance"].get<double>());
  EXPECT_EQ(average["final_test_accuracy"].get<double>(), ranks["final_test_accuracy"].get<double>());
  EXPECT_NE(average["per_epoch"][0]["test_loss"].get<double>(), ranks["per_epoch"][0]["test_loss"].get<double>());
  EXPECT_NEAR(average["push_sum_weight_total"].get<double>(), 4.0, 1e-5);
  Outcome refused = Shell(absl::StrCat(kNereid, " run models/mlp_fashion.pbtxt --workers 2 --threads 1 --batch 32 "
                                                "--train-limit 64 --test-limit 64 --quiet --gossip-eval average"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("--gossip-eval average is for gossip plans"));
}

// A rank whose every communicator call is late (NEREID_FAULTS delays): the
// pushes of every topology and overlap still meet, nothing deadlocks and no
// mass is lost.
TEST_F(GossipTest, ADelayedRankNeitherDeadlocksNorLosesMass) {
  for (const char* gossip : {"gossip(overlap=1)", "gossip(topology=ring,overlap=2)", "gossip(peers=2)"}) {
    SCOPED_TRACE(gossip);
    const std::string json = absl::StrCat(dir_, "/delayed_", ++runs_, ".json");
    Outcome o = Shell(absl::StrCat("NEREID_FAULTS='rank=1:delay=3ms' ", kNereid,
                                   " run models/mlp_fashion.pbtxt --workers 4 --threads 1 --batch 32 --train-limit ",
                                   32 * 8 * 4, " --test-limit 256 --epochs 1 --quiet --comm-timeout 30 --passes "
                                   "\"autodiff,sgd(lr=0.05),", gossip, "\" --metrics-json ", json),
                      300);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NEAR(Json::parse(ReadFile(json))["push_sum_weight_total"].get<double>(), 4.0, 1e-5);
  }
}

// The pushes packed into one message per peer and step (the default) move
// the same values as one message per parameter: the same losses, bit for bit.
TEST_F(GossipTest, BucketedPushesMoveTheSameValues) {
  Json bucketed = Run(4, 10, "autodiff,sgd(lr=0.05),gossip(peers=2)");
  Json apart = Run(4, 10, "autodiff,sgd(lr=0.05),gossip(peers=2,bucket_kb=0)");
  ASSERT_FALSE(bucketed.is_null());
  ASSERT_FALSE(apart.is_null());
  EXPECT_EQ(bucketed["step_losses"].get<std::vector<double>>(), apart["step_losses"].get<std::vector<double>>());
  EXPECT_EQ(bucketed["final_test_accuracy"].get<double>(), apart["final_test_accuracy"].get<double>());
}

TEST_F(GossipTest, MorePeersThanTheTopologyHasAreRefused) {
  Outcome o = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 4 --passes "
                                          "\"autodiff,sgd(lr=0.05),gossip(topology=ring,peers=2)\" -o ",
                                 dir_, "/plan.pbtxt"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("gossip: peers=2 out-neighbours per step needs as many distinct offsets; "
                                  "topology ring on 4 ranks has 1"));
}

TEST_F(GossipTest, AnUnknownTopologyIsRefused) {
  Outcome o = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 4 --passes "
                                          "\"autodiff,sgd(lr=0.05),gossip(topology=star)\" -o ",
                                 dir_, "/plan.pbtxt"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("gossip: topology 'star' is not one of: complete, exponential, linear, ring"));
}

}  // namespace
}  // namespace nereid
