// Hybrid data + model parallelism (hybrid_partition) end to end: real
// `nereid` worker processes over loopback TCP, each model-parallel group with
// a Gloo communicator of its own. Sharded layers must give data
// parallelism's arithmetic (same data, same initial weights), hold a
// fraction of its memory, and bad partition requests must be refused before
// anything runs.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
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
using ::nereid::testing::ReadFile;
using ::nereid::testing::Shell;
using ::testing::HasSubstr;

constexpr char kNereid[] = "runtime/cli/nereid";

using Metrics = testing::RunMetrics;

class HybridPartitionTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // `nereid run` of `model` on `workers` local workers with `passes`, `steps`
  // steps of 32 on Fashion-MNIST; rank 0's metrics.
  void Run(const std::string& model, int workers, const std::string& passes, const std::string& extra,
           Metrics* m, int steps = 50) {
    std::string json = absl::StrCat(dir_, "/", ++runs_, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " run models/", model, ".pbtxt --workers ", workers,
                                   " --threads 1 --batch 32 --train-limit ", 32 * steps * workers,
                                   " --test-limit 512 --epochs 1 --quiet --comm-timeout 30 --passes \"", passes,
                                   "\" --metrics-json ", json, " ", extra),
                      240);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    *m = testing::ReadRunMetrics(json);
  }

  std::string dir_;
  int runs_ = 0;
};

struct Case {
  const char* model;
  int workers;
  const char* partition;
  const char* optimizer;
  // Steps over which the losses must agree within 1e-5 relative. Sharding
  // changes only the order of float additions (partial sums over row
  // blocks, then the reduce-scatter), a few ulps per step (measured: about
  // 1e-7). Where training is chaotic those ulps grow exponentially (ReLU and
  // max-pool choices flip): LeNet at 4 ranks from step ~12, where two
  // data-parallel runs that differ only in their allreduce's bucket size
  // drift apart just as fast (7e-3 by step 25), and mlp_fashion at 2 ranks
  // with lr 0.05 and momentum 0.9 from step ~35 (1e-3 by step 45). So the
  // rates here are ones where rounding stays small, LeNet at 4 ranks is
  // compared over its first 10 steps, and LeNet at 2 ranks too: its first
  // convolution's direct kernel (ops/cpu/single_channel_conv.h) rounds
  // differently from oneDNN's, and on that trajectory the ulps grow from
  // step 9 (4.6e-6, 1.3e-5 at step 11, 1e-3 at step 13); on oneDNN's they
  // stayed within 2.3e-7 up to step 49. The same ulps, another trajectory.
  size_t exact_steps;
  int steps = 50;
};

class SameArithmeticTest : public HybridPartitionTest, public ::testing::WithParamInterface<Case> {};

TEST_P(SameArithmeticTest, HybridGivesDataParallelLosses) {
  const Case& c = GetParam();
  Metrics dp, hybrid;
  ASSERT_NO_FATAL_FAILURE(Run(c.model, c.workers, absl::StrCat("autodiff,", c.optimizer), "", &dp, c.steps));
  ASSERT_NO_FATAL_FAILURE(
      Run(c.model, c.workers, absl::StrCat(c.partition, ",autodiff,", c.optimizer), "", &hybrid, c.steps));
  EXPECT_EQ(dp.strategy, "data_parallel");
  EXPECT_EQ(hybrid.strategy, "hybrid");
  ASSERT_EQ(dp.losses.size(), static_cast<size_t>(c.steps));
  ASSERT_EQ(hybrid.losses.size(), static_cast<size_t>(c.steps));
  double worst = testing::WorstRelativeDifference(dp.losses, hybrid.losses, c.exact_steps);
  std::printf("%s, %d workers: losses %.4f -> %.4f; largest relative difference over %zu steps %.2g; state "
              "bytes per rank %lld (data parallel) vs %lld (hybrid)\n",
              c.model, c.workers, dp.losses.front(), dp.losses.back(), c.exact_steps, worst,
              static_cast<long long>(dp.state_bytes), static_cast<long long>(hybrid.state_bytes));
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(dp.losses.back(), dp.losses.front()) << "training did not learn";
  // Evaluation runs the forward exchanges too, on the same weights.
  EXPECT_NEAR(hybrid.accuracy, dp.accuracy, 0.01);
  EXPECT_LT(hybrid.state_bytes, dp.state_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    MlpAndLenet, SameArithmeticTest,
    ::testing::Values(Case{"mlp_fashion", 2, "hybrid_partition", "sgd(lr=0.02,momentum=0.9)", 50},
                      Case{"mlp_fashion", 4, "hybrid_partition", "sgd(lr=0.05,momentum=0.9)", 50},
                      Case{"mlp_fashion", 4, "hybrid_partition(group_size=2)", "adam(lr=0.001)", 50},
                      // Clipping reads the shards' scaled gradients (the norm was off 10% at
                      // step 4 when it read them unscaled); its ulps grow from step ~25.
                      Case{"mlp_fashion", 4, "hybrid_partition(group_size=2)", "clip(max_norm=0.5),sgd(lr=0.05)", 24},
                      // Every other parameter in shards too (FSDP), gathered where used.
                      Case{"mlp_fashion", 4, "hybrid_partition(group_size=2,shard_rest=true)",
                           "sgd(lr=0.05,momentum=0.9)", 50},
                      Case{"lenet_fashion", 4, "hybrid_partition(layers=fc1+fc2,shard_rest=true)",
                           "sgd(lr=0.02,momentum=0.9)", 10},
                      Case{"lenet_fashion", 2, "hybrid_partition(layers=fc1+fc2)", "sgd(lr=0.02)", 10},
                      Case{"lenet_fashion", 4, "hybrid_partition(layers=fc1+fc2)", "sgd(lr=0.02)", 10}));

// mlp_fashion's fc1 and fc2 hold 99% of its parameters: sharded 4 ways, each
// rank keeps about a quarter of the parameters and momentum.
TEST_F(HybridPartitionTest, ShardsCutPerRankStateAtFourRanks) {
  Metrics dp, hybrid;
  ASSERT_NO_FATAL_FAILURE(Run("mlp_fashion", 4, "autodiff,sgd(lr=0.05,momentum=0.9)", "--max-steps 2", &dp));
  ASSERT_NO_FATAL_FAILURE(
      Run("mlp_fashion", 4, "hybrid_partition,autodiff,sgd(lr=0.05,momentum=0.9)", "--max-steps 2", &hybrid));
  EXPECT_EQ(hybrid.model_parallel, 4);
  double saved = 1.0 - static_cast<double>(hybrid.state_bytes) / dp.state_bytes;
  std::printf("state bytes per rank: %lld vs %lld (%.1f%% less)\n", static_cast<long long>(dp.state_bytes),
              static_cast<long long>(hybrid.state_bytes), 100 * saved);
  EXPECT_GT(saved, 0.70);
}

// Checkpoints keep each rank's shards: a run resumed after its first epoch
// ends where an uninterrupted run ends.
TEST_F(HybridPartitionTest, ResumingRestoresEveryRanksShards) {
  const std::string passes = "hybrid_partition,autodiff,sgd(lr=0.05,momentum=0.9)";
  auto run = [&](const std::string& checkpoint, const std::string& extra) {
    Outcome o = Shell(absl::StrCat(kNereid, " run models/mlp_fashion.pbtxt --workers 2 --threads 1 --batch 32 ",
                                   "--dataset synthetic --train-limit 640 --test-limit 64 --quiet --comm-timeout 30 ",
                                   "--passes \"", passes, "\" --checkpoint ", dir_, "/", checkpoint, " --metrics-json ",
                                   dir_, "/", checkpoint, ".json ", extra),
                      240);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    return Json::parse(ReadFile(absl::StrCat(dir_, "/", checkpoint, ".json")));
  };
  Json straight = run("straight", "--epochs 2");
  run("resumed", "--epochs 1");
  Json resumed = run("resumed", "--epochs 2 --resume");
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/resumed/rank-1")) << "rank 1's shards were not checkpointed";
  std::vector<double> a = straight["step_losses"].get<std::vector<double>>();
  std::vector<double> b = resumed["step_losses"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);  // the second epoch only
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[10 + i], b[i]) << "step " << 10 + i;
}

// Tensor parallelism (megatron style) on the byte transformer: a model
// group reads one batch, so 2 and 4 tensor-parallel ranks must give one
// rank's losses, and 2 data x 2 tensor ranks data parallelism's on 2. Each
// rank holds 1/group of the blocks' weights and Adam's moments. At lr 3e-4
// and batch 8 the partial sums' rounding stays at 1e-7 (measured: 6.7e-8
// over 20 steps); at lr 1e-3 and batch 4 Adam amplifies it to 7e-4 by step
// 20, as it does between any two summation orders on this model.
TEST_F(HybridPartitionTest, TensorParallelGivesOneRanksLossesOnTheTransformer) {
  if (!std::filesystem::exists("/usr/share/games/fortunes")) {
    GTEST_SKIP() << "no fortune files (Debian's fortunes package; setup.sh installs it)";
  }
  // Five runs of the transformer take over 5 minutes under a sanitizer; its
  // plans are checked there (tensor_parallel_plan_test), its runs here.
  if (const char* sanitizer = std::getenv("NEREID_SANITIZER"); sanitizer != nullptr && *sanitizer != '\0') {
    GTEST_SKIP() << "the transformer's runs are left to the plain build (NEREID_SANITIZER=" << sanitizer << ")";
  }
  constexpr int kSteps = 20;
  auto run = [&](int workers, const std::string& partition, Metrics* m) {
    std::string json = absl::StrCat(dir_, "/", ++runs_, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " run models/char_transformer.pbtxt --dataset fortunes --workers ", workers,
                                   " --threads 1 --batch 8 --max-steps ", kSteps,
                                   " --test-limit 64 --epochs 1 --quiet --comm-timeout 60 --passes \"", partition,
                                   "autodiff,clip(max_norm=1),adam(lr=3e-4,decoupled=true,weight_decay=0.1)\" "
                                   "--metrics-json ", json),
                      300);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    *m = testing::ReadRunMetrics(json);
    ASSERT_EQ(m->losses.size(), static_cast<size_t>(kSteps));
  };
  Metrics one, dp2, tp2, tp4, two_by_two;
  ASSERT_NO_FATAL_FAILURE(run(1, "", &one));
  ASSERT_NO_FATAL_FAILURE(run(2, "hybrid_partition(style=megatron),", &tp2));
  ASSERT_NO_FATAL_FAILURE(run(4, "hybrid_partition(style=megatron),", &tp4));
  ASSERT_NO_FATAL_FAILURE(run(2, "", &dp2));
  ASSERT_NO_FATAL_FAILURE(run(4, "hybrid_partition(style=megatron,group_size=2),", &two_by_two));
  const double tp2_worst = testing::WorstRelativeDifference(one.losses, tp2.losses, kSteps);
  const double tp4_worst = testing::WorstRelativeDifference(one.losses, tp4.losses, kSteps);
  const double grid_worst = testing::WorstRelativeDifference(dp2.losses, two_by_two.losses, kSteps);
  std::printf("losses %.4f -> %.4f; largest relative difference over %d steps: 2 tensor ranks %.2g, 4 tensor ranks "
              "%.2g, 2 data x 2 tensor %.2g; state bytes per rank: 1 rank %lld, 2 tensor %lld, 4 tensor %lld\n",
              one.losses.front(), one.losses.back(), kSteps, tp2_worst, tp4_worst, grid_worst,
              static_cast<long long>(one.state_bytes), static_cast<long long>(tp2.state_bytes),
              static_cast<long long>(tp4.state_bytes));
  EXPECT_LT(tp2_worst, 1e-5);
  EXPECT_LT(tp4_worst, 1e-5);
  EXPECT_LT(grid_worst, 1e-5);
  EXPECT_LT(one.losses.back(), one.losses.front()) << "training did not learn";
  EXPECT_EQ(tp2.model_parallel, 2);
  EXPECT_EQ(tp4.model_parallel, 4);
  // The whole part (embeddings, LayerNorms, the row layers' biases) is under
  // 4% of the model: what each rank holds is within it of 1/group.
  EXPECT_LT(tp2.state_bytes, one.state_bytes / 2 + one.state_bytes / 25);
  EXPECT_LT(tp4.state_bytes, one.state_bytes / 4 + one.state_bytes / 25);
}

// Bad partition requests are refused by `nereid plan`, naming what is wrong.
TEST_F(HybridPartitionTest, BadRequestsAreRefusedBeforeAnythingRuns) {
  struct Bad {
    std::string model, workers, passes, says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"mlp_fashion", "4", "hybrid_partition(layers=fc9)", "'fc9' is not a dense layer of the model"},
           {"mlp_fashion", "4", "hybrid_partition(group_size=3)", "group_size 3 does not divide the 4 workers"},
           {"mlp_fashion", "3", "hybrid_partition", "does not divide into 3 shards"},
           {"mlp_fashion", "1", "hybrid_partition", "plan with --workers N"},
           {"mlp_fashion", "2", "autodiff,hybrid_partition", "hybrid_partition"},
       }) {
    Outcome o = Shell(absl::StrCat(kNereid, " plan models/", b.model, ".pbtxt --workers ", b.workers,
                                   " --passes \"", b.passes, "\" -o ", dir_, "/plan.pbtxt"));
    EXPECT_NE(o.exit_code, 0) << b.passes;
    EXPECT_THAT(o.output, HasSubstr(b.says)) << b.passes;
  }
  // A plan made for 4 workers does not run on 2.
  Outcome planned = Shell(absl::StrCat(kNereid, " plan models/mlp_fashion.pbtxt --workers 4 --passes ",
                                       "\"hybrid_partition,autodiff,data_parallel,sgd(lr=0.05)\" -o ", dir_,
                                       "/four.pbtxt"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  Outcome run = Shell(absl::StrCat(kNereid, " run ", dir_, "/four.pbtxt --workers 2 --dataset synthetic ",
                                   "--train-limit 64 --test-limit 64 --quiet --comm-timeout 20"));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("was planned for 4 workers, not 2"));
  // A plan edited so that its groups and collectives disagree does not load.
  for (const auto& [edit, says] : std::vector<std::pair<std::string, std::string>>{
           {"s/name: \\\"model\\\"/name: \\\"other\\\"/", "runs on group 'model', which the plan's groups do not declare"},
           {"/name: \\\"model\\\"/{n;s/size: 4/size: 3/}", "does not divide 4 workers"},
           {"/name: \\\"model\\\"/{n;s/size: 4/size: 2/}",
            "says group 'model' has 4 ranks, but at the plan's 4 workers it has 2"},
       }) {
    Outcome check = Shell(absl::StrCat("sed \"", edit, "\" ", dir_, "/four.pbtxt > ", dir_, "/edited.pbtxt && ",
                                       kNereid, " check ", dir_, "/edited.pbtxt"));
    EXPECT_NE(check.exit_code, 0) << edit;
    EXPECT_THAT(check.output, HasSubstr(says)) << edit;
  }
}

}  // namespace
}  // namespace nereid
