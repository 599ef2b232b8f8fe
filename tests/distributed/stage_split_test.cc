// Model parallelism by layers (stage_split) end to end: real `nereid` worker
// processes over loopback TCP, each running its own part of one plan and
// exchanging activations forward and their gradients backward through
// Send/Recv nodes whose backward half autodiff derived. The parts must
// compute what one process computes (same data, same initial weights), each
// rank must hold only its parameters, and bad requests are refused before
// anything runs.

#include <algorithm>
#include <cmath>
#include <string>
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
using ::nereid::testing::Shell;
using ::testing::HasSubstr;

constexpr char kNereid[] = "runtime/cli/nereid";

using Metrics = testing::RunMetrics;

class StageSplitTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // `nereid run` of `model` on `workers` local workers, 50 steps of 32 on
  // Fashion-MNIST; rank 0's metrics.
  Outcome Run(const std::string& model, int workers, const std::string& passes, Metrics* m) {
    std::string json = absl::StrCat(dir_, "/", ++runs_, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " run models/", model, ".pbtxt --workers ", workers,
                                   " --threads 1 --batch 32 --train-limit 1600 --test-limit 512 --epochs 1 --quiet "
                                   "--comm-timeout 30 --passes \"",
                                   passes, "\" --metrics-json ", json),
                      240);
    if (o.exit_code != 0 || m == nullptr) return o;
    *m = testing::ReadRunMetrics(json);
    return o;
  }

  std::string dir_;
  int runs_ = 0;
};

struct Case {
  const char* model;
  int workers;
  const char* cuts;
  const char* optimizer;
};

// mlp in two parts; lenet in three (convolutions and dense layers apart).
TEST_F(StageSplitTest, ThePartsComputeWhatOneProcessComputes) {
  for (const Case& c : {Case{"mlp_fashion", 2, "fc2", "sgd(lr=0.05)"},
                        Case{"lenet_fashion", 3, "conv2+fc1", "sgd(lr=0.05,momentum=0.9)"}}) {
    SCOPED_TRACE(c.model);
    Metrics whole, split;
    Outcome o = Run(c.model, 1, absl::StrCat("autodiff,", c.optimizer), &whole);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    o = Run(c.model, c.workers, absl::StrCat("stage_split(at=", c.cuts, "),autodiff,", c.optimizer), &split);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(split.strategy, "model_parallel");
    ASSERT_EQ(split.losses.size(), 50u);
    ASSERT_EQ(whole.losses.size(), 50u);
    EXPECT_LE(testing::WorstRelativeDifference(split.losses, whole.losses), 1e-5);
    EXPECT_NEAR(split.accuracy, whole.accuracy, 0.003);
    // Rank 0 holds the first part's parameters only.
    EXPECT_LT(split.state_bytes, whole.state_bytes);
    EXPECT_GT(split.bytes_sent_per_step, 0);
  }
}

TEST_F(StageSplitTest, BadRequestsAreRefusedBeforeAnythingRuns) {
  Outcome o = Run("mlp_fashion", 2, "stage_split(at=fc9),autodiff,sgd(lr=0.05)", nullptr);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("stage_split: at: 'fc9' is not a layer of the model"));
  o = Run("mlp_fashion", 3, "stage_split(at=fc2),autodiff,sgd(lr=0.05)", nullptr);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("2 parts run on 2 workers, but the plan is for 3"));
}

// A plan made once runs as it is, as one graph or as each rank's graph;
// `nereid check` checks either as a whole, and both train alike.
TEST_F(StageSplitTest, APlanFileIsCheckedAsAWholeAndRunsInEitherForm) {
  const std::string passes = "\"stage_split(at=fc2),autodiff,sgd(lr=0.05)\"";
  std::vector<double> losses[2];
  int form = 0;
  for (const char* name : {"split.pbtxt", "split.plan.pbtxt"}) {
    SCOPED_TRACE(name);
    const bool per_rank = form == 1;
    const std::string plan = absl::StrCat(dir_, "/", name), json = absl::StrCat(plan, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 2 --passes ", passes,
                                   per_rank ? " --per-rank" : "", " -o ", plan));
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_THAT(o.output, HasSubstr(per_rank ? "(2 ranks' graphs)" : "nodes)"));
    o = Shell(absl::StrCat(kNereid, " check ", plan));
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_THAT(o.output, HasSubstr("2 checked: each "));
    EXPECT_THAT(o.output, HasSubstr("rank  nodes      params       state  act/sample   comm/step  comm/sample  sends  recvs"));
    o = Shell(absl::StrCat(kNereid, " run ", plan, " --workers 2 --threads 1 --batch 32 --train-limit 1600 ",
                           "--test-limit 512 --epochs 1 --quiet --comm-timeout 30 --metrics-json ", json),
              240);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const Metrics m = testing::ReadRunMetrics(json);
    EXPECT_EQ(m.strategy, "model_parallel");
    losses[form++] = m.losses;
  }
  ASSERT_EQ(losses[0].size(), 50u);
  EXPECT_LE(testing::WorstRelativeDifference(losses[1], losses[0]), 1e-5);
  // A per-rank plan made for 2 runs on 2.
  Outcome o = Shell(absl::StrCat(kNereid, " run ", dir_, "/split.plan.pbtxt --workers 3 --quiet"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("holds graphs for 2 workers, not 3"));
}

// A rank that stops is blamed by the rank waiting for its transfer, within
// the communication timeout.
TEST_F(StageSplitTest, TheRankAPartWaitsForIsBlamedWhenItStops) {
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=1:stop@6 ", kNereid,
                                 " run models/mlp_fashion.pbtxt --workers 2 --threads 1 --dataset synthetic "
                                 "--train-limit 512 --test-limit 128 --epochs 1 --batch 32 --quiet --comm-timeout 5 "
                                 "--passes \"stage_split(at=fc2),autodiff,sgd(lr=0.05)\""),
                    120);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("error: rank 1 made no progress for"));
  EXPECT_THAT(o.output, HasSubstr("phase=point_to_point transfers="));
  EXPECT_THAT(o.output, HasSubstr("to_rank1"));  // the node waiting, by name
}

// A rank whose step fails (here: a corrupted message header) stops waiting
// for its other transfers at once instead of at the communication timeout
// (600 s here; the shell's limit is 120 s), and its peers learn of it from
// the closed connections.
TEST_F(StageSplitTest, ARankThatFailsMidStepStopsWaitingForItsPeers) {
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=1:corrupt@1 ", kNereid,
                                 " run models/lenet_fashion.pbtxt --workers 3 --threads 1 --dataset synthetic "
                                 "--train-limit 512 --test-limit 128 --epochs 1 --batch 32 --quiet --comm-timeout 600 "
                                 "--passes \"stage_split(at=conv2+fc1),autodiff,sgd(lr=0.05)\""),
                    120);
  EXPECT_NE(o.exit_code, 137) << "killed at the shell's limit:\n" << o.output;
  EXPECT_NE(o.exit_code, 0);
  // Call 1 is whichever of rank 1's two first receives starts first.
  EXPECT_THAT(o.output, HasSubstr("[rank 1] error: models/lenet_fashion.pbtxt, rank 1's graph: node '"));
  EXPECT_THAT(o.output, HasSubstr("at step 0: receiving from rank "));
  EXPECT_THAT(o.output, HasSubstr("the message header says"));
}

}  // namespace
}  // namespace nereid
