// Parameter servers (the parameter_server pass) end to end: real `nereid`
// processes over loopback TCP, the last ranks servers holding the parameters
// and their optimizer state, the others workers pulling parameters and
// pushing gradients in chunks. Synchronous training must compute what
// data_parallel computes on the same workers (same data, same initial
// weights), and bad requests are refused before anything runs.

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

class ParameterServerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // `nereid run` of `model` on `ranks` local processes, kSteps steps of 32
  // per worker on Fashion-MNIST; rank 0's metrics.
  Outcome Run(const std::string& model, int ranks, const std::string& passes, Metrics* m, int train_examples) {
    std::string json = absl::StrCat(dir_, "/", ++runs_, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " run models/", model, ".pbtxt --workers ", ranks,
                                   " --threads 1 --batch 32 --train-limit ", train_examples,
                                   " --test-limit 512 --epochs 1 --quiet --comm-timeout 60 --passes \"", passes,
                                   "\" --metrics-json ", json),
                      280);
    if (o.exit_code != 0 || m == nullptr) return o;
    *m = testing::ReadRunMetrics(json);
    return o;
  }

  std::string dir_;
  int runs_ = 0;
};

// Every comparison is of a server run with a data-parallel run on the same
// steps: 25 show an arithmetic that drifts apart.
constexpr int kSteps = 25;

struct Case {
  const char* model;
  int workers;
  int servers;
  const char* optimizer;
  const char* chunk_kb;
  int state_per_parameter;  // a data-parallel rank's state (parameters and optimizer state) over its parameters
  const char* extra = "";    // more options of the pass
};

// Four workers on 1 and 2 servers, both models. mlp: chunks smaller than
// the first layer's weight, Adam (its moments updated chunk by chunk on the
// server); lenet: momentum, parameters balanced over 2 servers; mlp split:
// 2 servers sharing the first layer's weight chunk by chunk, with its Adam
// moments. Each model's data-parallel run is the reference of its cases.
TEST_F(ParameterServerTest, SynchronousServersComputeWhatDataParallelComputes) {
  std::map<std::string, Metrics> data_parallel;  // by model
  for (const Case& c : {Case{"mlp_fashion", 4, 1, "adam(lr=0.001)", "64", 3},
                        Case{"mlp_fashion", 4, 2, "adam(lr=0.001)", "64", 3, ",split=true"},
                        Case{"lenet_fashion", 4, 1, "sgd(lr=0.05,momentum=0.9)", "16", 2},
                        Case{"lenet_fashion", 4, 2, "sgd(lr=0.05,momentum=0.9)", "16", 2}}) {
    SCOPED_TRACE(absl::StrCat(c.model, ", ", c.servers, " servers", c.extra));
    const int examples = kSteps * 32 * c.workers;
    Outcome o;
    if (!data_parallel.count(c.model)) {
      o = Run(c.model, c.workers, absl::StrCat("autodiff,", c.optimizer, ",data_parallel"), &data_parallel[c.model],
              examples);
      ASSERT_EQ(o.exit_code, 0) << o.output;
    }
    const Metrics& dp = data_parallel[c.model];
    Metrics ps;
    o = Run(c.model, c.workers + c.servers,
            absl::StrCat("autodiff,", c.optimizer, ",parameter_server(servers=", c.servers, ",chunk_kb=", c.chunk_kb,
                         c.extra, ")"),
            &ps, examples);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(ps.strategy, "parameter_server");
    ASSERT_EQ(dp.losses.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(ps.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_LE(testing::WorstRelativeDifference(ps.losses, dp.losses), 1e-5);
    EXPECT_NEAR(ps.accuracy, dp.accuracy, 0.003);
    // The servers hold the model and its optimizer state between them, as
    // each data-parallel rank does alone; a worker holds a copy of the
    // parameters and no optimizer state.
    ASSERT_EQ(ps.rank_state_bytes.size(), static_cast<size_t>(c.workers + c.servers));
    int64_t on_servers = 0;
    for (int r = c.workers; r < c.workers + c.servers; ++r) {
      EXPECT_GT(ps.rank_state_bytes[r], 0) << "rank " << r;
      on_servers += ps.rank_state_bytes[r];
    }
    EXPECT_EQ(on_servers, dp.state_bytes);
    for (int r = 0; r < c.workers; ++r) {
      EXPECT_EQ(ps.rank_state_bytes[r], ps.rank_state_bytes[0]) << "rank " << r;
    }
    if (std::string(c.extra).find("split=true") != std::string::npos) {
      // Split chunk by chunk, the two servers' shares are within a chunk
      // (64 KiB, with its two Adam moments) of each other.
      EXPECT_LE(std::abs(ps.rank_state_bytes[c.workers] - ps.rank_state_bytes[c.workers + 1]), 3 * 64 * 1024);
    }
    // The copy is the parameters alone, without the optimizer's state.
    EXPECT_EQ(c.state_per_parameter * ps.rank_state_bytes[0], dp.state_bytes);
    EXPECT_EQ(ps.rank_peak_tensor_bytes.size(), static_cast<size_t>(c.workers + c.servers));
  }
}

// The byte transformer on its text windows: a server's part has no data
// Input and takes the window length from a worker's part; Adam with global
// clipping on the server computes what data parallel does.
TEST_F(ParameterServerTest, TheTransformerOnAServerComputesWhatDataParallelComputes) {
  auto run = [&](int ranks, const std::string& tail, Metrics* m) {
    std::string json = absl::StrCat(dir_, "/lm", ranks, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " run models/char_transformer.pbtxt --dataset fortunes --workers ", ranks,
                                   " --threads 1 --batch 2 --max-steps 3 --test-limit 8 --quiet --comm-timeout 60 "
                                   "--passes \"autodiff,adam(lr=1e-3,decoupled=true,weight_decay=0.1)",
                                   tail, "\" --metrics-json ", json),
                      280);
    if (o.exit_code == 0) *m = testing::ReadRunMetrics(json);
    return o;
  };
  Metrics dp, ps;
  Outcome o = run(2, ",data_parallel", &dp);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run(3, ",parameter_server(servers=1)", &ps);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(ps.strategy, "parameter_server");
  ASSERT_EQ(dp.losses.size(), 3u);
  ASSERT_EQ(ps.losses.size(), 3u);
  EXPECT_LE(testing::WorstRelativeDifference(ps.losses, dp.losses), 1e-5);
}

// Colocated: both ranks train and each serves half of the parameters (the
// shards balanced by size), pushing to and pulling from itself through its
// communicator's self-delivery: still data_parallel's arithmetic, and each
// rank holds its copy plus its shard with that shard's momentum.
TEST_F(ParameterServerTest, ColocatedServersComputeWhatDataParallelComputes) {
  const int examples = kSteps * 32 * 2;
  Metrics dp, ps;
  Outcome o = Run("lenet_fashion", 2, "autodiff,sgd(lr=0.05,momentum=0.9),data_parallel", &dp, examples);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = Run("lenet_fashion", 2,
          "autodiff,sgd(lr=0.05,momentum=0.9),parameter_server(colocated=true,chunk_kb=16,exchange=p2p)", &ps,
          examples);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(ps.strategy, "parameter_server");
  ASSERT_EQ(ps.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LE(testing::WorstRelativeDifference(ps.losses, dp.losses), 1e-5);
  ASSERT_EQ(ps.rank_state_bytes.size(), 2u);
  // Copies (a third of a data-parallel rank's state: parameters, momentum)
  // twice, and the shards (the whole model and momentum) between them.
  EXPECT_EQ(ps.rank_state_bytes[0] + ps.rank_state_bytes[1], dp.state_bytes + 2 * (dp.state_bytes / 2));
  EXPECT_GT(ps.rank_state_bytes[0], dp.state_bytes / 2);
  EXPECT_GT(ps.rank_state_bytes[1], dp.state_bytes / 2);
}

// Colocated servers exchanging by collectives (exchange=auto picks them for
// sgd): every parameter sharded over the 3 ranks (padded where 3 does not
// divide it), pushed by a reduce-scatter and pulled by an all-gather per
// bucket (16 KiB: several buckets, some of one parameter): data_parallel's
// losses, and each rank a copy of the parameters plus a third of the
// parameters and momentum.
TEST_F(ParameterServerTest, ColocatedServersExchangingByCollectivesComputeWhatDataParallelComputes) {
  const int examples = kSteps * 32 * 3;
  Metrics dp, ps;
  Outcome o = Run("lenet_fashion", 3, "autodiff,sgd(lr=0.05,momentum=0.9),data_parallel", &dp, examples);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = Run("lenet_fashion", 3, "autodiff,sgd(lr=0.05,momentum=0.9),parameter_server(colocated=true,chunk_kb=16)", &ps,
          examples);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  ASSERT_EQ(ps.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LE(testing::WorstRelativeDifference(ps.losses, dp.losses), 1e-5);
  ASSERT_EQ(ps.rank_state_bytes.size(), 3u);
  // dp.state_bytes is the parameters and the momentum, half each: every
  // rank holds the parameters (dp / 2) and a third of both, padded by at
  // most 2 elements a tensor.
  for (int64_t bytes : ps.rank_state_bytes) {
    EXPECT_GE(bytes, dp.state_bytes / 2 + dp.state_bytes / 3);
    EXPECT_LE(bytes, dp.state_bytes / 2 + dp.state_bytes / 3 + 256);
  }
  Outcome plan = Shell(absl::StrCat(kNereid, " plan models/lenet_fashion.pbtxt --workers 3 -o ", dir_,
                                    "/plan.pbtxt --passes \"autodiff,sgd(lr=0.05),parameter_server(colocated=true)\""),
                       60);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("exchange=collective: "));
}

TEST_F(ParameterServerTest, BadRequestsAreRefusedBeforeAnythingRuns) {
  struct Refused {
    int ranks;
    const char* passes;
    const char* error;
  };
  const Refused cases[] = {
      {2, "autodiff,sgd(lr=0.05),parameter_server(servers=2)", "parameter_server: 2 servers need at least 3 ranks"},
      {3, "autodiff,parameter_server(servers=1)", "parameter_server"},
      {3, "autodiff,sgd(lr=0.05),parameter_server(servers=1,chunk_kb=0.5)", "chunk_kb must be >= 1"},
      {1, "autodiff,sgd(lr=0.05),parameter_server(colocated=true)", "colocated servers need at least 2 ranks"},
      {2, "autodiff,sgd(lr=0.05),parameter_server(servers=1,exchange=collective)",
       "exchange=collective needs colocated=true"},
      {2, "autodiff,sgd(lr=0.05),parameter_server(colocated=true,exchange=rdma)",
       "exchange=rdma is not auto, collective or p2p"},
      {2, "autodiff,sgd(lr=0.05),parameter_server(colocated=true,mode=ssp,staleness=1,exchange=collective)",
       "exchange=collective: mode=ssp delays the updates"},
  };
  for (const Refused& c : cases) {
    Outcome o = Run("mlp_fashion", c.ranks, c.passes, nullptr, 256);
    EXPECT_NE(o.exit_code, 0) << c.passes;
    EXPECT_THAT(o.output, HasSubstr(c.error)) << c.passes;
  }
}

// A server that dies or stops is named, and every process stops: killed, the
// launcher sees its exit; stopped inside its first step, it is the rank that
// makes no progress while the workers report that they wait for it.
TEST_F(ParameterServerTest, AServerThatDiesOrStopsIsNamed) {
  const std::string run = absl::StrCat(
      kNereid, " run models/lenet_fashion.pbtxt --workers 3 --threads 1 --batch 32 --dataset synthetic ",
      "--train-limit 1024 --test-limit 64 --epochs 1 --quiet --comm-timeout 60 --worker-timeout 5 ",
      "--passes \"autodiff,sgd(lr=0.02),parameter_server(servers=1)\"");
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=2:kill@30 ", run), 120);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("error: rank 2 was killed by signal 9"));
  o = Shell(absl::StrCat("NEREID_FAULTS=rank=2:stop@30 ", run), 120);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("error: rank 2 made no progress for 5s"));
}

// Rank `rank`'s trace (--trace PATH): by step, when the first node of the
// step named `name` (or, with a leading '*', ending in the rest) started, in
// Unix microseconds; the first `steps` steps (evaluation's come after).
std::map<int64_t, double> NodeTimes(const std::string& trace_path, int rank, int64_t steps, const std::string& name) {
  std::string path = trace_path;
  path.insert(path.size() - 5, absl::StrCat(".rank", rank));  // t.json -> t.rankR.json
  const Json trace = Json::parse(testing::ReadFile(path));
  double origin = 0;
  std::map<int64_t, double> times;
  for (const Json& e : trace["traceEvents"]) {
    if (e.value("name", "") == "process_name") origin = e["args"]["clock_origin_unix_us"].get<double>();
  }
  for (const Json& e : trace["traceEvents"]) {
    const std::string n = e.value("name", "");
    const bool named = name[0] == '*' ? absl::EndsWith(n, name.substr(1)) : n == name;
    if (!named || e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("step")) continue;
    const int64_t step = e["args"]["step"].get<int64_t>();
    const double at = origin + e["ts"].get<double>();
    if (step >= steps) continue;
    auto [it, inserted] = times.emplace(step, at);
    if (!inserted) it->second = std::min(it->second, at);
  }
  return times;
}

// Stale-synchronous servers with one slow worker (NEREID_FAULTS slow=):
// when worker 0 computes step u's loss, the slow worker 1 has pushed step
// u - 1 - staleness at least (the pull worker 0's forward waits for needs
// that step's pushes), and worker 0 does run ahead up to the bound: with
// staleness 2 it is seen two steps ahead, which sync never allows.
TEST_F(ParameterServerTest, StaleSynchronousWorkersRunAtMostStalenessStepsAhead) {
  for (int staleness : {0, 2}) {
    SCOPED_TRACE(staleness);
    const std::string trace = absl::StrCat(dir_, "/ssp", staleness, ".json");
    Outcome o = Shell(absl::StrCat(
        "NEREID_FAULTS=rank=1:slow=40ms ", kNereid,
        " run models/lenet_fashion.pbtxt --workers 3 --threads 1 --batch 32 --dataset synthetic ",
        "--train-limit 1024 --test-limit 64 --epochs 1 --quiet --comm-timeout 60 --trace ", trace,
        " --passes \"autodiff,sgd(lr=0.02),parameter_server(servers=1,mode=ssp,staleness=", staleness, ")\""),
        120);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const std::map<int64_t, double> fast = NodeTimes(trace, 0, 16, "loss"), slow = NodeTimes(trace, 1, 16, "*/push");
    ASSERT_EQ(fast.size(), 16u);
    ASSERT_EQ(slow.size(), 16u);
    int most_ahead = 0;
    for (const auto& [step, at] : fast) {
      int64_t slow_done = -1;  // the latest step the slow worker had started pushing before
      for (const auto& [s, t] : slow) {
        if (t <= at) slow_done = std::max(slow_done, s);
      }
      EXPECT_GE(slow_done, step - 1 - staleness) << "worker 0 computed step " << step;
      most_ahead = std::max(most_ahead, static_cast<int>(step - 1 - slow_done));
    }
    EXPECT_EQ(most_ahead, staleness);
  }
}

// The servers' parameters and optimizer state are checkpointed (each rank
// its own): a run stopped after epoch 1 and resumed ends where an
// uninterrupted run ends, bit for bit; and with --max-restarts a server
// killed in the second epoch is restarted by the launcher, with every
// worker, from the first epoch's checkpoint, with no --resume by hand.
TEST_F(ParameterServerTest, AResumedServerRunEndsWhereAnUninterruptedOneEnds) {
  auto run = [&](int epochs, const std::string& checkpoint, const std::string& extra) {
    return Shell(absl::StrCat(kNereid, " run models/lenet_fashion.pbtxt --workers 3 --threads 1 --batch 32 ",
                              "--dataset synthetic --train-limit 1024 --test-limit 128 --quiet --comm-timeout 60 ",
                              "--passes \"autodiff,sgd(lr=0.02,momentum=0.9),parameter_server(servers=1)\" --epochs ",
                              epochs, " --checkpoint ", dir_, "/", checkpoint, " ", extra),
                 120);
  };
  Outcome o = run(2, "whole", absl::StrCat("--metrics-json ", dir_, "/whole.json"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run(1, "split", "");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run(2, "split", absl::StrCat("--resume --metrics-json ", dir_, "/resumed.json"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const Metrics whole = testing::ReadRunMetrics(absl::StrCat(dir_, "/whole.json"));
  const Metrics resumed = testing::ReadRunMetrics(absl::StrCat(dir_, "/resumed.json"));
  ASSERT_EQ(whole.losses.size(), 32u);
  ASSERT_EQ(resumed.losses.size(), 16u);  // the second epoch's
  for (size_t i = 0; i < resumed.losses.size(); ++i) EXPECT_EQ(resumed.losses[i], whole.losses[16 + i]) << i;
  EXPECT_EQ(resumed.rank_state_bytes, whole.rank_state_bytes);

  // Call 900 of the server (rank 2) falls in the second epoch's sixth step.
  o = Shell(absl::StrCat("NEREID_FAULTS=restart=0:rank=2:kill@900 ", kNereid,
                         " run models/lenet_fashion.pbtxt --workers 3 --threads 1 --batch 32 --dataset synthetic ",
                         "--train-limit 1024 --test-limit 128 --quiet --comm-timeout 60 --worker-timeout 20 ",
                         "--passes \"autodiff,sgd(lr=0.02,momentum=0.9),parameter_server(servers=1)\" --epochs 2 ",
                         "--checkpoint ", dir_, "/killed --max-restarts 2 --metrics-json ", dir_, "/killed.json"),
            120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("restart 1/2: rank 2 was killed by signal 9"));
  EXPECT_THAT(o.output, HasSubstr(absl::StrCat("every worker starts again from ", dir_, "/killed/epoch-1.ckpt")));
  const Metrics restarted = testing::ReadRunMetrics(absl::StrCat(dir_, "/killed.json"));
  ASSERT_FALSE(whole.parameter_fingerprint.empty());
  EXPECT_EQ(restarted.parameter_fingerprint, whole.parameter_fingerprint);
}

}  // namespace
}  // namespace nereid
