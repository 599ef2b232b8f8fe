// Data-parallel training end to end: real `nereid` worker processes talking
// Gloo over loopback TCP, started by hand (as on several machines) or by the
// launcher (`nereid run --workers N`).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint.h"
#include "tests/process_util.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNereid[] = "runtime/cli/nereid";
// A small run on synthetic data shaped like Fashion-MNIST: 512 examples, so
// a rank of 2 takes 8 steps of 32 and one of 4 takes 4.
constexpr char kSmallRun[] =
    "models/mlp_fashion.pbtxt --dataset synthetic --train-limit 512 --test-limit 128 --epochs 1 --quiet "
    "--comm-timeout 20";

using ::nereid::testing::Outcome;
using ::nereid::testing::ReadFile;
using ::nereid::testing::Shell;

// A string or number field of the metrics JSON (flat keys, no nesting).
// Plain string search: std::regex trips GCC 12's -Wmaybe-uninitialized at -O1.
std::string JsonField(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  while (at < json.size() && json[at] == ' ') ++at;
  if (at < json.size() && json[at] == '"') {
    size_t end = json.find('"', at + 1);
    return end == std::string::npos ? "" : json.substr(at + 1, end - at - 1);
  }
  size_t end = json.find_first_of(",}", at);
  return json.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The number after `prefix` in `text`, or -1.
int NumberAfter(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  at += prefix.size();
  size_t end = at;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  return end == at ? -1 : std::stoi(text.substr(at, end - at));
}

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDir(); }

  // `world` workers started by hand, each with its own rank and metrics file,
  // in the background; waits for all. Returns every rank's exit code.
  // `env_per_rank`: "NAME=value ..." to start rank r's command with.
  std::vector<int> RunByHand(int world, const std::string& rendezvous, const std::vector<std::string>& extra_per_rank,
                             std::string* output, const std::vector<std::string>& env_per_rank = {}) {
    std::string script;
    for (int r = 0; r < world; ++r) {
      const std::string env = r < static_cast<int>(env_per_rank.size()) ? env_per_rank[r] + " " : "";
      absl::StrAppend(&script, env, kNereid, " run ", kSmallRun, " --rank ", r, " --world ", world, " --rendezvous ",
                      rendezvous, " --metrics-json ", dir_, "/rank", r, ".json ",
                      r < static_cast<int>(extra_per_rank.size()) ? extra_per_rank[r] : "", " > ", dir_, "/rank", r,
                      ".log 2>&1 & pid", r, "=$!; ");
    }
    for (int r = 0; r < world; ++r) absl::StrAppend(&script, "wait $pid", r, "; echo rank", r, "=$?; ");
    Outcome o = Shell(script);
    *output = o.output;
    std::vector<int> codes;
    for (int r = 0; r < world; ++r) {
      codes.push_back(NumberAfter(o.output, absl::StrCat("rank", r, "=")));
      absl::StrAppend(output, "\n--- rank ", r, " ---\n", ReadFile(absl::StrCat(dir_, "/rank", r, ".log")));
    }
    return codes;
  }

  // One worker with batch 64 and two ranks with batch 32 each, both with
  // `extra`; their checkpoints go to dir_/one and dir_/two.
  void RunOneAndTwoWorkers(const std::string& extra) {
    Outcome one = Shell(absl::StrCat(kNereid, " run ", kSmallRun, extra, " --batch 64 --checkpoint ", dir_, "/one"));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    std::string output, two = extra + " --batch 32 --checkpoint " + dir_ + "/two";
    std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/store", {two, two}, &output);
    ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  }

  // Both checkpoints at `step`: the largest difference between their values
  // (*worst), and the largest magnitude in rank one's tensors whose name
  // contains `marked` (*marked_max: proof that training moved them).
  void CompareCheckpoints(int64_t step, const std::string& marked, double* worst, double* marked_max) {
    absl::StatusOr<Checkpoint> a = LoadLatestCheckpoint(dir_ + "/one");
    absl::StatusOr<Checkpoint> b = LoadLatestCheckpoint(dir_ + "/two");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->step, step);
    ASSERT_EQ(b->step, step);
    ASSERT_EQ(a->tensors.size(), b->tensors.size());
    for (size_t i = 0; i < a->tensors.size(); ++i) {
      const auto& [name, x] = a->tensors[i];
      const Tensor& y = b->tensors[i].second;
      ASSERT_EQ(name, b->tensors[i].first);
      ASSERT_EQ(x.num_elements(), y.num_elements()) << name;
      for (int64_t k = 0; k < x.num_elements(); ++k) {
        double value = x.data<float>()[k];
        *worst = std::max(*worst, std::fabs(value - y.data<float>()[k]));
        if (absl::StrContains(name, marked)) *marked_max = std::max(*marked_max, std::fabs(value));
      }
    }
  }

  std::string dir_;
};

class WorldSizeTest : public DataParallelTest, public ::testing::WithParamInterface<int> {};

TEST_P(WorldSizeTest, EveryRankEndsWithBitwiseIdenticalParameters) {
  int world = GetParam();
  std::string output;
  std::vector<int> codes = RunByHand(world, "file:" + dir_ + "/store", {}, &output);
  std::string first;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(codes[r], 0) << output;
    std::string json = ReadFile(absl::StrCat(dir_, "/rank", r, ".json"));
    EXPECT_EQ(JsonField(json, "strategy"), "data_parallel");
    EXPECT_EQ(JsonField(json, "steps"), absl::StrCat(512 / world / 64 + (512 / world % 64 != 0)));
    EXPECT_GT(std::stod(JsonField(json, "bytes_sent_per_step")), 0);
    std::string fingerprint = JsonField(json, "parameter_fingerprint");
    ASSERT_FALSE(fingerprint.empty()) << json;
    if (r == 0) first = fingerprint;
    EXPECT_EQ(fingerprint, first) << "rank " << r << " diverged from rank 0";
  }
}

INSTANTIATE_TEST_SUITE_P(TwoAndFour, WorldSizeTest, ::testing::Values(2, 4));

// Two workers with batch 32 each take the same steps as one worker with batch
// 64: rank r's batch t is the examples at positions 64t + 2i + r of the
// epoch's order, so the two halves are exactly one worker's batch, and the
// average of the two halves' mean gradients is the whole batch's mean. Only
// the order of float additions differs (per-rank sums, then the allreduce),
// which perturbs each gradient by a few float32 ulps (relative ~1e-7); eight
// SGD steps with momentum carry that into the parameters (measured: at most
// 1.8e-7 absolute). The tolerance, 1e-5 absolute on weights of scale ~0.1,
// leaves a 50x margin while still catching any real difference (a wrong
// shard, a missing average or a sum instead of a mean moves weights by
// >= 1e-3).
TEST_F(DataParallelTest, TwoWorkersMatchOneWorkerWithTheCombinedBatch) {
  ASSERT_NO_FATAL_FAILURE(RunOneAndTwoWorkers(" --max-steps 8"));
  double worst = 0, moved = 0;
  ASSERT_NO_FATAL_FAILURE(CompareCheckpoints(8, "momentum", &worst, &moved));
  std::printf("largest parameter difference: %.3g (momentum up to %.3g)\n", worst, moved);
  EXPECT_GT(moved, 1e-4) << "training did not move the parameters";
  EXPECT_LT(worst, 1e-5);
}

// Pipe-SGD (pipeline(width=2)) across two ranks is the same arithmetic as on
// one worker with the combined batch (same tolerance and reason as above),
// and both ranks end bitwise equal, although each keeps two steps in flight.
TEST_F(DataParallelTest, PipelinedWorkersMatchOnePipelinedWorkerWithTheCombinedBatch) {
  ASSERT_NO_FATAL_FAILURE(
      RunOneAndTwoWorkers(" --passes \"autodiff,pipeline(width=2),sgd(lr=0.05,momentum=0.5)\" --max-steps 8"));
  EXPECT_EQ(JsonField(ReadFile(dir_ + "/rank0.json"), "parameter_fingerprint"),
            JsonField(ReadFile(dir_ + "/rank1.json"), "parameter_fingerprint"));
  double worst = 0, delayed = 0;
  ASSERT_NO_FATAL_FAILURE(CompareCheckpoints(8, "/delay_1", &worst, &delayed));
  EXPECT_GT(delayed, 1e-6) << "no delayed gradient was carried: the plan is not pipelined";
  EXPECT_LT(worst, 1e-5);
}

TEST_F(DataParallelTest, LauncherRunsWorkersAndReportsTheRun) {
  Outcome o = Shell(absl::StrCat(kNereid, " run ", kSmallRun, " --workers 2 --threads 1 --batch 32 --metrics-json ",
                                 dir_, "/run.json"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::string json = ReadFile(dir_ + "/run.json");
  EXPECT_EQ(JsonField(json, "workers"), "2");
  EXPECT_EQ(JsonField(json, "strategy"), "data_parallel");
  EXPECT_THAT(JsonField(json, "passes"), HasSubstr("data_parallel"));
  // Ring allreduce over 2 ranks sends each gradient byte once: the mlp has
  // 784*512+512 + 512*512+512 + 512*10+10 = 669,706 floats.
  EXPECT_NEAR(std::stod(JsonField(json, "bytes_sent_per_step")), 669706 * 4, 64);
  EXPECT_NEAR(std::stod(JsonField(json, "bytes_received_per_step")), 669706 * 4, 64);
  EXPECT_THAT(o.output, HasSubstr("[rank 0]"));
}

// --transport shm (ranks of one host through shared memory) computes what
// Gloo computes. On 2 ranks every sum has two terms, so the parameters are
// bitwise those of Gloo's run; on 4 both rings add in their own orders
// (equal to rounding). auto picks shm for the launcher's workers. Gossip's
// point-to-point pushes keep push-sum's mass over shm too.
TEST_F(DataParallelTest, SharedMemoryTransportComputesWhatGlooComputes) {
  auto run = [&](int workers, const std::string& transport, const std::string& extra) {
    const std::string json = absl::StrCat(dir_, "/", transport, workers, ".json");
    Outcome o = Shell(absl::StrCat(kNereid, " run ", kSmallRun, " --workers ", workers, " --threads 1 --batch 32",
                                   " --transport ", transport, extra, " --metrics-json ", json));
    EXPECT_EQ(o.exit_code, 0) << o.output;
    return ReadFile(json);
  };
  const std::string gloo2 = run(2, "gloo", ""), shm2 = run(2, "shm", "");
  EXPECT_EQ(JsonField(gloo2, "transport"), "gloo");
  EXPECT_EQ(JsonField(shm2, "transport"), "shm");
  EXPECT_EQ(JsonField(shm2, "parameter_fingerprint"), JsonField(gloo2, "parameter_fingerprint"));
  EXPECT_EQ(JsonField(shm2, "bytes_sent_per_step"), JsonField(gloo2, "bytes_sent_per_step"));
  const std::string gloo4 = run(4, "gloo", ""), auto4 = run(4, "auto", "");
  EXPECT_EQ(JsonField(auto4, "transport"), "shm");
  const double a = std::stod(JsonField(gloo4, "final_train_loss")), b = std::stod(JsonField(auto4, "final_train_loss"));
  EXPECT_NEAR(a, b, 1e-5 * std::fabs(a));
  const std::string gossip = run(4, "shm", " --passes \"autodiff,sgd(lr=0.05),gossip(peers=2,overlap=1)\"");
  EXPECT_NEAR(std::stod(JsonField(gossip, "push_sum_weight_total")), 4.0, 1e-5);
}

// Four workers started one by one, two on each of two named hosts: the
// hierarchical transport (auto's choice for such workers) sums within each
// host through shared memory and across hosts through Gloo. Its sums are taken
// in another order than Gloo's ring, so the run matches Gloo's to rounding,
// and its ranks stay bitwise equal.
TEST_F(DataParallelTest, HierarchicalTransportAcrossTwoNamedHostsMatchesGloo) {
  const std::vector<std::string> hosts = {"NEREID_HOST_ID=a", "NEREID_HOST_ID=a", "NEREID_HOST_ID=b",
                                          "NEREID_HOST_ID=b"};
  auto run = [&](const std::string& transport, const std::string& store) {
    const std::string extra = " --threads 1 --batch 32 --transport " + transport;
    std::string output;
    std::vector<int> codes = RunByHand(4, "file:" + dir_ + "/" + store, std::vector<std::string>(4, extra), &output,
                                       hosts);
    EXPECT_EQ(codes, std::vector<int>({0, 0, 0, 0})) << output;
    std::vector<std::string> json;
    for (int r = 0; r < 4; ++r) json.push_back(ReadFile(absl::StrCat(dir_, "/rank", r, ".json")));
    return json;
  };
  const std::vector<std::string> gloo = run("gloo", "store-gloo"), hier = run("auto", "store-hier");
  EXPECT_EQ(JsonField(hier[0], "transport"), "hierarchical");
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(JsonField(hier[r], "parameter_fingerprint"), JsonField(hier[0], "parameter_fingerprint")) << r;
  }
  const double a = std::stod(JsonField(gloo[0], "final_train_loss")), b = std::stod(JsonField(hier[0], "final_train_loss"));
  EXPECT_NEAR(a, b, 1e-5 * std::fabs(a));
}

// With --trace, every rank writes its own timeline (trace.rank<r>.json),
// with its collectives on the engine's track and its steps.
// compress(method=fp16) with Pipe-SGD: gradients travel as 16-bit floats
// (half the bytes of the run above), both ranks still end bitwise equal.
TEST_F(DataParallelTest, Fp16WireHalvesTheBytesAndRanksAgree) {
  const std::string passes =
      " --batch 32 --passes \"autodiff,compress(method=fp16),pipeline(width=2),sgd(lr=0.05,momentum=0.5)\"";
  std::string output;
  std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/store", {passes, passes}, &output);
  ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  std::string json = ReadFile(dir_ + "/rank0.json");
  EXPECT_THAT(JsonField(json, "passes"), HasSubstr("compress"));
  EXPECT_NEAR(std::stod(JsonField(json, "bytes_sent_per_step")), 669706 * 2, 64);
  EXPECT_EQ(JsonField(json, "parameter_fingerprint"), JsonField(ReadFile(dir_ + "/rank1.json"), "parameter_fingerprint"));
}

// pipeline + lookahead across two ranks: each rank computes at its own
// look-ahead (its own last gradient), yet the parameters, updated only with
// the averaged gradients, stay bitwise equal on both ranks (the fingerprint
// leaves out the per-rank look-ahead state), and differ from plain Pipe-SGD's.
TEST_F(DataParallelTest, LookaheadRanksAgreeOnTheParameters) {
  const std::string stale = " --batch 32 --passes \"autodiff,pipeline(width=2),sgd(lr=0.05,momentum=0.5)\"";
  const std::string ahead = " --batch 32 --passes \"autodiff,pipeline(width=2),sgd(lr=0.05,momentum=0.5),lookahead\"";
  std::string output;
  std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/store", {stale, stale}, &output);
  ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  std::string stale_fingerprint = JsonField(ReadFile(dir_ + "/rank0.json"), "parameter_fingerprint");
  codes = RunByHand(2, "file:" + dir_ + "/store2", {ahead, ahead}, &output);
  ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  std::string json = ReadFile(dir_ + "/rank0.json");
  EXPECT_THAT(JsonField(json, "passes"), HasSubstr("lookahead"));
  EXPECT_EQ(JsonField(json, "parameter_fingerprint"), JsonField(ReadFile(dir_ + "/rank1.json"), "parameter_fingerprint"));
  EXPECT_NE(JsonField(json, "parameter_fingerprint"), stale_fingerprint);

  // Stopped after one epoch and resumed, it ends where the uninterrupted run
  // ends: each rank's look-ahead gradient comes back from its own checkpoint.
  const std::string one_epoch = JsonField(json, "parameter_fingerprint");
  std::string epochs2 = ahead + " --epochs 2", split = " --checkpoint " + dir_ + "/split";
  codes = RunByHand(2, "file:" + dir_ + "/store3", {epochs2, epochs2}, &output);
  ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  std::string straight = JsonField(ReadFile(dir_ + "/rank0.json"), "parameter_fingerprint");
  EXPECT_NE(straight, one_epoch);  // a second epoch moved the parameters
  codes = RunByHand(2, "file:" + dir_ + "/store4", {ahead + split, ahead + split}, &output);
  ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/split/rank-1/epoch-1.ckpt"));
  codes = RunByHand(2, "file:" + dir_ + "/store5", {epochs2 + split + " --resume", epochs2 + split + " --resume"},
                    &output);
  ASSERT_EQ(codes, std::vector<int>({0, 0})) << output;
  EXPECT_EQ(JsonField(ReadFile(dir_ + "/rank0.json"), "parameter_fingerprint"), straight);
}

// The sum of every "key": number in `json`.
double SumOfFields(const std::string& json, const std::string& key) {
  double sum = 0;
  for (size_t at = json.find("\"" + key + "\":"); at != std::string::npos;
       at = json.find("\"" + key + "\":", at + 1)) {
    sum += std::stod(json.substr(at + key.size() + 3));
  }
  return sum;
}

// Compression with error feedback (1-bit SGD) across two ranks: the ranks
// agree bitwise on the shared parameters; the bytes they measured on the wire
// are the plan's per-layer accounting; and a run stopped after one epoch and
// resumed ends bitwise where an uninterrupted run ends, which needs each
// rank's own residuals from its own checkpoint (rank 0's, or zeros, would
// change the next updates). Without them the resume is refused.
TEST_F(DataParallelTest, CompressedRunResumesWithEachRanksErrorFeedback) {
  const std::string passes =
      " --batch 32 --passes \"autodiff,compress(method=onebit,min_elements=256),sgd(lr=0.05,momentum=0.5)\"";
  auto run = [&](const std::string& store, const std::string& extra, std::vector<int> expected) {
    std::string output, args = passes + extra;
    std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/" + store, {args, args}, &output);
    EXPECT_EQ(codes, expected) << output;
    return output;
  };
  run("s1", " --epochs 2 --checkpoint " + dir_ + "/straight", {0, 0});
  std::string straight = ReadFile(dir_ + "/rank0.json");
  EXPECT_EQ(JsonField(straight, "parameter_fingerprint"),
            JsonField(ReadFile(dir_ + "/rank1.json"), "parameter_fingerprint"));
  EXPECT_THAT(straight, HasSubstr("\"method\":\"onebit\""));
  EXPECT_NEAR(std::stod(JsonField(straight, "bytes_sent_per_step")), SumOfFields(straight, "sent_bytes"), 1);
  EXPECT_LT(SumOfFields(straight, "sent_bytes"), SumOfFields(straight, "uncompressed_sent_bytes") / 8);

  run("s2", " --epochs 1 --checkpoint " + dir_ + "/split", {0, 0});
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/split/rank-1/epoch-1.ckpt"));
  run("s3", " --epochs 2 --resume --checkpoint " + dir_ + "/split", {0, 0});
  EXPECT_EQ(JsonField(ReadFile(dir_ + "/rank0.json"), "parameter_fingerprint"),
            JsonField(straight, "parameter_fingerprint"));

  std::filesystem::remove_all(dir_ + "/split/rank-1");
  std::string output = run("s4", " --epochs 3 --resume --comm-timeout 5 --checkpoint " + dir_ + "/split", {1, 1});
  EXPECT_THAT(output, HasSubstr("resuming rank 1 needs its own state (error-feedback residuals"));
}

TEST_F(DataParallelTest, LaunchedWorkersEachWriteATrace) {
  Outcome o = Shell(absl::StrCat(kNereid, " run ", kSmallRun,
                                 " --workers 2 --threads 1 --batch 32 --max-steps 2 --trace ", dir_, "/trace.json"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/trace.json"));
  for (int r = 0; r < 2; ++r) {
    std::string trace = ReadFile(absl::StrCat(dir_, "/trace.rank", r, ".json"));
    ASSERT_FALSE(trace.empty()) << "rank " << r;
    EXPECT_THAT(trace, HasSubstr("\"traceEvents\":["));
    EXPECT_THAT(trace, HasSubstr(absl::StrCat(
                           "{\"name\":\"allreduce bucket 0\",\"cat\":\"comm\",\"ph\":\"X\",\"pid\":", r,
                           ",\"tid\":1000,")));
    EXPECT_THAT(trace, HasSubstr("\"args\":{\"name\":\"collectives\"}"));
    EXPECT_THAT(trace, HasSubstr("{\"name\":\"step 1\",\"cat\":\"step\",\"ph\":\"X\""));
    EXPECT_THAT(trace, HasSubstr("\"cat\":\"wait\",\"ph\":\"b\""));
  }
}

// Calls 1-12 are the start-up check of the 12 parameter and momentum
// tensors; call 20 is an allreduce a few steps into training.
TEST_F(DataParallelTest, KilledWorkerEndsTheRunNamingTheRank) {
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=1:kill@20 ", kNereid, " run ", kSmallRun,
                                 " --workers 2 --threads 1 --batch 32 --worker-timeout 5"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("rank 1 was killed by signal 9"));
}

// --max-restarts: a worker killed in the third epoch (first run only) makes
// the launcher restart both from the second epoch's checkpoint, or with
// --checkpoint-every from the newest checkpoint within the third, and the run
// ends with the parameters of a run nothing interrupted (Fashion-MNIST, so
// the parameters still move at the end). A fault in the first epoch of every
// run restarts from the beginning (no checkpoint yet) until the restarts are
// spent, and the error says so.
TEST_F(DataParallelTest, AKilledWorkerIsRestartedFromTheCheckpointAndEndsBitForBit) {
  const std::string run = absl::StrCat(
      kNereid, " run models/logreg_fashion.pbtxt --train-limit 2048 --test-limit 256 --epochs 3 --quiet ",
      "--comm-timeout 20 --workers 2 --threads 1 --worker-timeout 20 --checkpoint ", dir_);
  Outcome whole = Shell(absl::StrCat(run, "/whole --metrics-json ", dir_, "/whole.json"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string fingerprint = JsonField(ReadFile(dir_ + "/whole.json"), "parameter_fingerprint");
  ASSERT_FALSE(fingerprint.empty());
  // The kill lands a few steps into the third epoch in both (the checks
  // before the checkpoints within epochs are calls too, hence the later call).
  struct Case {
    const char* name;
    const char* extra;
    int kill_at_call;
    const char* resumed_from;
  };
  for (const Case& c : {Case{"epochs", "", 50, "epoch-2.ckpt (step 32)"},
                        Case{"steps", "--checkpoint-every 5", 56, "epoch-2-step-35.ckpt (step 35)"}}) {
    SCOPED_TRACE(c.name);
    Outcome restarted = Shell(absl::StrCat("NEREID_FAULTS=restart=0:rank=1:kill@", c.kill_at_call, " ", run, "/",
                                           c.name, " ", c.extra,
                                           " --max-restarts 2 --metrics-json ", dir_, "/", c.name, ".json"));
    ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
    EXPECT_THAT(restarted.output, HasSubstr("restart 1/2: rank 1 was killed by signal 9"));
    EXPECT_THAT(restarted.output,
                HasSubstr(absl::StrCat("every worker starts again from ", dir_, "/", c.name, "/", c.resumed_from)));
    EXPECT_EQ(JsonField(ReadFile(absl::StrCat(dir_, "/", c.name, ".json")), "parameter_fingerprint"), fingerprint);
  }

  Outcome exhausted = Shell(absl::StrCat("NEREID_FAULTS=rank=1:kill@8 ", run, "/exhausted --max-restarts 1"));
  EXPECT_EQ(exhausted.exit_code, 1) << exhausted.output;
  EXPECT_THAT(exhausted.output, HasSubstr("restart 1/1: rank 1 was killed by signal 9"));
  EXPECT_THAT(exhausted.output, HasSubstr("from the beginning (no checkpoint yet)"));
  EXPECT_THAT(exhausted.output, HasSubstr("(after 1 restart)"));
}

TEST_F(DataParallelTest, StoppedWorkerEndsTheRunNamingTheRank) {
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=1:stop@20 ", kNereid, " run ", kSmallRun,
                                 " --workers 2 --threads 1 --batch 32 --worker-timeout 3"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("rank 1 made no progress for 3s"));
}

// Rank 1 held by an injected delay from its first call (a rank stuck in its
// start-up): rank 0 times out waiting in the first check, and the launcher
// blames rank 1, not the rank whose timeout fired.
TEST_F(DataParallelTest, ARankStuckInItsStartupIsBlamed) {
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=1:delay=1000h ", kNereid, " run ", kSmallRun,
                                 " --workers 2 --threads 1 --comm-timeout 3"));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("error: rank 1 made no progress for"));
  EXPECT_THAT(o.output, HasSubstr("while rank 0 exited with code 1 while phase=check_identical_state waiting_for_peers"));
}

TEST_F(DataParallelTest, WorkersWithDifferentPlansAreRefused) {
  std::string output;
  std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/store", {"--batch 32", "--batch 16"}, &output);
  EXPECT_NE(codes[0], 0) << output;
  EXPECT_NE(codes[1], 0) << output;
  EXPECT_THAT(output, HasSubstr("rank 1 has batch=16 but rank 0 has batch=32"));
}

// Settings that change what is computed or reported are named at the
// rendezvous: a 15 s hang and an unexplained Gloo timeout before.
TEST_F(DataParallelTest, WorkersWithDifferentSettingsAreRefusedNamingThem) {
  std::string output;
  std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/store", {"--max-steps 3", "--max-steps 5"},
                                     &output);
  EXPECT_NE(codes[0], 0) << output;
  EXPECT_NE(codes[1], 0) << output;
  EXPECT_THAT(output, HasSubstr("rank 1 has max_steps=5 but rank 0 has max_steps=3"));
}

// A corrupted allreduce result on rank 1 (call 14: a bucket of the first
// steps) makes the ranks' parameters differ: the periodic check stops both
// ranks, naming the step and the ranks, where they used to exit 0 apart.
TEST_F(DataParallelTest, RanksThatDriftApartAreStopped) {
  setenv("NEREID_FAULTS", "rank=1:corrupt@14", 1);
  std::string output;
  std::vector<int> codes =
      RunByHand(2, "file:" + dir_ + "/store", {"--check-every 2", "--check-every 2"}, &output);
  unsetenv("NEREID_FAULTS");
  EXPECT_NE(codes[0], 0) << output;
  EXPECT_NE(codes[1], 0) << output;
  EXPECT_THAT(output, HasSubstr("the ranks' parameters drifted apart by step 2: rank 0 has fingerprint"));
  EXPECT_THAT(output, HasSubstr(", rank 1 has "));
  // Unharmed, the same runs pass the checks.
  codes = RunByHand(2, "file:" + dir_ + "/store2", {"--check-every 2", "--check-every 2"}, &output);
  EXPECT_EQ(codes, std::vector<int>({0, 0})) << output;
}

// The same corruption with --verify-messages is caught at the call that
// made it, before any parameter differs: both ranks fail, the corrupted one
// naming the collective and the rank whose result differs. (The check's own
// AllGather counts as a call, so call 14 is now a start-up broadcast or its
// check: either way the mismatch is seen.)
TEST_F(DataParallelTest, VerifyMessagesCatchesTheCorruptedCollective) {
  setenv("NEREID_FAULTS", "rank=1:corrupt@14", 1);
  std::string output;
  std::vector<int> codes = RunByHand(2, "file:" + dir_ + "/store",
                                     {"--check-every 0 --verify-messages", "--check-every 0 --verify-messages"},
                                     &output);
  unsetenv("NEREID_FAULTS");
  EXPECT_NE(codes[0], 0) << output;
  EXPECT_NE(codes[1], 0) << output;
  EXPECT_THAT(output, HasSubstr("error: --verify-messages: "));
  EXPECT_THAT(output, HasSubstr("ended with different values on rank(s) 1 than on rank 0 (seen from rank 1)"));
  EXPECT_THAT(output, Not(HasSubstr("drifted apart")));
  // Unharmed, verification changes nothing but the cost.
  codes = RunByHand(2, "file:" + dir_ + "/store2", {"--verify-messages", "--verify-messages"}, &output);
  EXPECT_EQ(codes, std::vector<int>({0, 0})) << output;
}

// With the default worker timeout (300 s), rank 0's collective times out
// first (5 s here) while rank 1 is stopped: the launcher still blames rank 1,
// the one rank 0 was waiting for.
TEST_F(DataParallelTest, TheStoppedRankIsBlamedWhenItsPeersTimeOutFirst) {
  Outcome o = Shell(absl::StrCat("NEREID_FAULTS=rank=1:stop@20 ", kNereid, " run ", kSmallRun,
                                 " --workers 2 --threads 1 --batch 32 --comm-timeout 5"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.output, HasSubstr("error: rank 1 made no progress for"));
  EXPECT_THAT(o.output, HasSubstr("while rank 0 exited with code 1 while phase="));
  EXPECT_THAT(o.output, HasSubstr("waiting_for_peers"));
}

// A short --worker-timeout does not kill a healthy run while it loads data
// and sets up (the start-up stages stay in the launcher's start-up window).
TEST_F(DataParallelTest, AShortWorkerTimeoutSparesAHealthyStart) {
  Outcome o = Shell(absl::StrCat(kNereid, " run ", kSmallRun, " --workers 2 --threads 1 --worker-timeout 3"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

TEST_F(DataParallelTest, RedisRendezvous) {
  if (!std::filesystem::exists("/usr/bin/redis-server")) GTEST_SKIP() << "redis-server is not installed";
  // A free port: bind to 0 and ask, then hand it to redis.
  int port = 20000 + static_cast<int>(getpid() % 20000);
  pid_t redis = fork();
  if (redis == 0) {
    execl("/usr/bin/redis-server", "redis-server", "--port", std::to_string(port).c_str(), "--bind", "127.0.0.1",
          "--save", "", "--appendonly", "no", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(redis, 0);
  // Wait (bounded) until it answers.
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = Shell(absl::StrCat("redis-cli -p ", port, " ping"), 5).output.find("PONG") != std::string::npos;
    if (!up) usleep(50000);
  }
  std::string output;
  std::vector<int> codes;
  if (up) {
    codes = RunByHand(2, absl::StrCat("redis://127.0.0.1:", port), {"--batch 32 --run-id redis-test",
                                                                   "--batch 32 --run-id redis-test"},
                      &output);
  }
  kill(redis, SIGKILL);
  waitpid(redis, nullptr, 0);
  ASSERT_TRUE(up) << "redis-server did not start on port " << port;
  EXPECT_EQ(codes, std::vector<int>({0, 0})) << output;
  EXPECT_EQ(JsonField(ReadFile(dir_ + "/rank0.json"), "parameter_fingerprint"),
            JsonField(ReadFile(dir_ + "/rank1.json"), "parameter_fingerprint"));
}

}  // namespace
}  // namespace nereid
