// Training end to end: convergence, determinism, resume, bad data. Runs use
// the synthetic dataset (or a slice of Fashion-MNIST) to stay fast.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint.h"
#include "absl/strings/str_cat.h"
#include "runtime/trainer.h"
#include "graph/graph_io.h"
#include "ops/model_loader.h"
#include "ops/model_summary.h"
#include "runtime/test_set_evaluation.h"
#include "plan/build_plan.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  return dir;
}

TrainOptions Synthetic(const std::string& model, int64_t epochs) {
  TrainOptions o;
  o.model_path = "models/" + model + ".pbtxt";
  o.dataset = "synthetic";
  o.epochs = epochs;
  o.batch = 32;
  o.threads = 2;
  o.seed = 7;
  o.progress = nullptr;
  return o;
}

// Logistic regression on separable synthetic classes reaches a small loss
// and perfect accuracy.
// Evaluation batches hold no more than a training step: the training
// batch's activations plus one gradient's worth (a few more images for vgg11
// and mlp), never
// fewer than the training batch (the language model's 22 MiB windows).
TEST(EvaluationBatchTest, HoldsNoMoreThanATrainingStep) {
  auto summary_of = [](const std::string& model) { return SummarizeModel(**LoadModel(*ReadGraphFile(model))); };
  auto batch_for = [](const std::string& model, int64_t train_batch) {
    PlanDef plan;
    *plan.mutable_source() = ReadGraphFile(model)->def;
    TrainOptions options;
    options.batch = train_batch;
    return EvaluationBatch(plan, options);
  };
  for (const auto& [model, train_batch] : {std::pair<std::string, int64_t>{"models/vgg11_cifar.pbtxt", 16},
                                           {"models/mlp_fashion.pbtxt", 64}}) {
    SCOPED_TRACE(model);
    const ModelSummary summary = summary_of(model);
    const int64_t batch = batch_for(model, train_batch);
    EXPECT_EQ(batch, train_batch + summary.parameter_bytes / summary.activation_bytes_per_sample);
    EXPECT_LT(batch, 1000);
    EXPECT_LE(batch * summary.activation_bytes_per_sample,
              train_batch * summary.activation_bytes_per_sample + summary.parameter_bytes);
  }
  EXPECT_EQ(batch_for("models/char_transformer.pbtxt", 32), 32);
  EXPECT_EQ(batch_for("models/char_transformer.pbtxt", 512), 512);
}

// A rank of a hybrid plan holds 1/4 of vgg11's dense layers: it has room
// for the training batch plus its own (smaller) gradient, so it evaluates
// smaller batches than data parallel's rank, and its evaluation too stays
// within its training step.
TEST(EvaluationBatchTest, ARankHoldingShardsEvaluatesWithinItsOwnGradient) {
  const std::string vgg = "models/vgg11_cifar.pbtxt";
  PlanRequest request;
  request.model = vgg;
  request.target.workers = 4;
  request.dataset = "synthetic";
  auto pipeline = PipelineFor("hybrid_partition,autodiff,sgd(lr=0.01,momentum=0.9)", request.target);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  request.pipeline = *std::move(pipeline);
  auto built = BuildPlan(request);
  ASSERT_TRUE(built.ok()) << built.status();
  int64_t held = 0;  // a rank's trainable parameters: the shards' shapes in the partitioned plan
  for (const Node* n : built->whole->nodes()) {
    if (n->op() == "Parameter" && NodeAttrBool(*n, "trainable", true)) held += n->outputs()[0].shape.KnownElements() * 4;
  }
  const ModelSummary summary = SummarizeModel(**LoadModel(*ReadGraphFile(vgg)));
  ASSERT_LT(held, summary.parameter_bytes / 2);
  TrainOptions options;
  options.batch = 16;
  EXPECT_EQ(EvaluationBatch(built->plan, options), 16 + held / summary.activation_bytes_per_sample);
  PlanDef whole_model;
  *whole_model.mutable_source() = built->plan.source();
  EXPECT_EQ(EvaluationBatch(whole_model, options), 16 + summary.parameter_bytes / summary.activation_bytes_per_sample);
}

TEST(TrainingTest, TinyModelConverges) {
  auto result = Train(Synthetic("logreg_fashion", 3));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(result->final_train_loss, 0.05);
  EXPECT_GT(result->per_epoch[0].train_loss, result->final_train_loss);
  EXPECT_DOUBLE_EQ(result->final_test_accuracy, 1.0);
  EXPECT_GT(result->peak_tensor_bytes, 0);
  // Every step's finish time, in order (the benches' steady step time).
  const std::vector<double>& finished = result->step_finished_seconds;
  ASSERT_EQ(static_cast<int64_t>(finished.size()), result->steps);
  ASSERT_GT(result->steps, 1);
  EXPECT_GT(finished.front(), 0.0);
  EXPECT_TRUE(std::is_sorted(finished.begin(), finished.end()));
  EXPECT_GT(finished.back(), finished.front());
}

std::vector<std::pair<std::string, Tensor>> FinalState(const std::string& dir) {
  auto ckpt = LoadLatestCheckpoint(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? ckpt->tensors : std::vector<std::pair<std::string, Tensor>>{};
}

void ExpectBitwiseEqual(const std::vector<std::pair<std::string, Tensor>>& a,
                        const std::vector<std::pair<std::string, Tensor>>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(a[i].second.BitwiseEquals(b[i].second)) << a[i].first;
  }
}

TEST(TrainingTest, SameSeedSameParametersBitwise) {
  for (const char* model : {"mlp_fashion", "lenet_fashion"}) {
    TrainOptions a = Synthetic(model, 1), b = Synthetic(model, 1);
    a.checkpoint_dir = TempDir(std::string(model) + "_a");
    b.checkpoint_dir = TempDir(std::string(model) + "_b");
    ASSERT_TRUE(Train(a).ok());
    ASSERT_TRUE(Train(b).ok());
    ExpectBitwiseEqual(FinalState(a.checkpoint_dir), FinalState(b.checkpoint_dir));
  }
}

// --eval-every scores the test set within the epoch without touching
// training: the scores come at the asked steps (not at the epoch's end,
// which scores anyway) and the parameters are those of a run without them.
TEST(TrainingTest, EvaluationsWithinAnEpochLeaveTrainingAsItWas) {
  TrainOptions plain = Synthetic("mlp_fashion", 1), scored = Synthetic("mlp_fashion", 1);
  for (TrainOptions* o : {&plain, &scored}) {
    o->train_limit = 640;  // 20 steps of 32
    o->test_limit = 200;
  }
  scored.eval_every = 5;
  plain.checkpoint_dir = TempDir("eval_every_plain");
  scored.checkpoint_dir = TempDir("eval_every_scored");
  absl::StatusOr<TrainResult> a = Train(plain), b = Train(scored);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(a->interval_evaluations.empty());
  std::vector<int64_t> steps;
  for (const EpochMetrics& m : b->interval_evaluations) {
    steps.push_back(m.step);
    EXPECT_TRUE(std::isfinite(m.test_loss) && m.test_loss > 0) << m.step;
    EXPECT_GE(m.test_accuracy, 0);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 10, 15}));
  ASSERT_EQ(b->per_epoch.size(), 1u);
  EXPECT_EQ(b->per_epoch[0].step, 20);
  EXPECT_EQ(a->per_epoch[0].test_loss, b->per_epoch[0].test_loss);
  ExpectBitwiseEqual(FinalState(plain.checkpoint_dir), FinalState(scored.checkpoint_dir));
}

// vgg11's 3x3 convolutions run oneDNN's Winograd kernels on a scratchpad of
// ours: on the library's, runs like these crashed (2 in 3 from the CLI,
// less often here) on two threads.
TEST(TrainingTest, WinogradConvolutionsOnTwoThreadsAreReproducible) {
  if (const char* sanitizer = std::getenv("NEREID_SANITIZER"); sanitizer != nullptr && std::string(sanitizer) == "thread") {
    GTEST_SKIP() << "vgg11 under ThreadSanitizer takes over ten minutes; the plain and ASan runs cover this";
  }
  std::vector<uint64_t> fingerprints;
  for (int run = 0; run < 2; ++run) {
    TrainOptions o = Synthetic("vgg11_cifar", 1);
    o.batch = 16;
    o.train_limit = 48;
    o.test_limit = 16;
    auto result = Train(o);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->steps, 3);
    fingerprints.push_back(result->parameter_fingerprint);
  }
  EXPECT_EQ(fingerprints[0], fingerprints[1]);
}

TEST(TrainingTest, ResumeMatchesAnUninterruptedRun) {
  TrainOptions whole = Synthetic("mlp_fashion", 2);
  whole.checkpoint_dir = TempDir("whole");
  auto full = Train(whole);
  ASSERT_TRUE(full.ok()) << full.status();

  TrainOptions first = Synthetic("mlp_fashion", 1);
  first.checkpoint_dir = TempDir("interrupted");
  ASSERT_TRUE(Train(first).ok());
  TrainOptions rest = Synthetic("mlp_fashion", 2);
  rest.checkpoint_dir = first.checkpoint_dir;
  rest.resume = true;
  auto resumed = Train(rest);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->epochs, 1);  // only the second epoch ran
  ExpectBitwiseEqual(FinalState(whole.checkpoint_dir), FinalState(rest.checkpoint_dir));
  EXPECT_DOUBLE_EQ(resumed->final_test_accuracy, full->final_test_accuracy);
  EXPECT_DOUBLE_EQ(resumed->final_train_loss, full->final_train_loss);
}

// A checkpoint knows the run that wrote it: another model's (the same
// parameter names) or another data order is refused on --resume, naming
// both sides; the same run resumes.
TEST(TrainingTest, ResumeRefusesAnotherRunsCheckpoint) {
  TrainOptions logreg = Synthetic("logreg_fashion", 1);
  logreg.checkpoint_dir = TempDir("identity");
  ASSERT_TRUE(Train(logreg).ok());
  TrainOptions svm = Synthetic("svm_fashion", 2);
  svm.checkpoint_dir = logreg.checkpoint_dir;
  svm.resume = true;
  absl::StatusOr<TrainResult> other_model = Train(svm);
  ASSERT_FALSE(other_model.ok());
  EXPECT_THAT(std::string(other_model.status().message()), ::testing::HasSubstr("was written by another run (plan "));
  TrainOptions reseeded = Synthetic("logreg_fashion", 2);
  reseeded.checkpoint_dir = logreg.checkpoint_dir;
  reseeded.resume = true;
  reseeded.seed = logreg.seed + 1;
  absl::StatusOr<TrainResult> other_order = Train(reseeded);
  ASSERT_FALSE(other_order.ok());
  EXPECT_THAT(std::string(other_order.status().message()),
              ::testing::HasSubstr(absl::StrCat("seed ", logreg.seed, " there, ", logreg.seed + 1, " here")));
  TrainOptions same = Synthetic("logreg_fashion", 2);
  same.checkpoint_dir = logreg.checkpoint_dir;
  same.resume = true;
  absl::StatusOr<TrainResult> resumed = Train(same);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->epochs, 1);
}

// A run stopped within an epoch (--max-steps here; a killed worker under
// --max-restarts) checkpoints there, and the resume goes on from the next
// batch of that epoch: the end is bitwise the uninterrupted run's.
// --checkpoint-every keeps only the newest checkpoint within an epoch.
TEST(TrainingTest, ACheckpointWithinAnEpochResumesFromTheNextBatch) {
  TrainOptions whole = Synthetic("mlp_fashion", 2);
  whole.checkpoint_dir = TempDir("whole_within");
  auto full = Train(whole);
  ASSERT_TRUE(full.ok()) << full.status();
  const int64_t steps_per_epoch = full->steps / 2;

  TrainOptions first = Synthetic("mlp_fashion", 2);
  first.checkpoint_dir = TempDir("within");
  first.checkpoint_every = 3;
  first.max_steps = steps_per_epoch + 4;
  ASSERT_TRUE(Train(first).ok());
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(first.checkpoint_dir)) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_THAT(files, ::testing::ElementsAre("LATEST", "epoch-1-step-" + std::to_string(steps_per_epoch + 4) + ".ckpt",
                                            "epoch-1.ckpt"));
  TrainOptions rest = Synthetic("mlp_fashion", 2);
  rest.checkpoint_dir = first.checkpoint_dir;
  rest.resume = true;
  auto resumed = Train(rest);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->steps, steps_per_epoch - 4);  // the rest of the second epoch
  ExpectBitwiseEqual(FinalState(whole.checkpoint_dir), FinalState(rest.checkpoint_dir));
}

// A run whose loss stays at its start (learning rate 0 here; a codec that
// trains to chance in practice) is flagged at half the run, in the progress
// output and the metrics; a run that learns is not.
TEST(TrainingTest, ALossThatDoesNotImproveIsFlagged) {
  TrainOptions stuck = Synthetic("logreg_fashion", 1);
  stuck.passes = "autodiff,sgd(lr=0)";
  char* text = nullptr;
  size_t size = 0;
  std::FILE* progress = open_memstream(&text, &size);
  stuck.progress = progress;
  auto flagged = Train(stuck);
  std::fclose(progress);
  const std::string printed(text, size);
  std::free(text);
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_TRUE(flagged->loss_not_improving);
  EXPECT_THAT(printed, HasSubstr("warning: the loss has not improved on its start after"));
  auto learning = Train(Synthetic("logreg_fashion", 1));
  ASSERT_TRUE(learning.ok()) << learning.status();
  EXPECT_FALSE(learning->loss_not_improving);
  TrainOptions off = stuck;
  off.progress = nullptr;
  off.stall_check_percent = 0;
  auto unchecked = Train(off);
  ASSERT_TRUE(unchecked.ok());
  EXPECT_FALSE(unchecked->loss_not_improving);
}

TEST(TrainingTest, CorruptCheckpointIsAClearError) {
  TrainOptions o = Synthetic("logreg_fashion", 1);
  o.checkpoint_dir = TempDir("corrupt");
  ASSERT_TRUE(Train(o).ok());
  {
    std::fstream f(o.checkpoint_dir + "/epoch-1.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  o.resume = true;
  o.epochs = 2;
  auto result = Train(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("epoch-1.ckpt: checksum mismatch"));
}

// A crash between writing a checkpoint and LATEST, or a damaged newest file:
// --resume takes the newest valid checkpoint instead of starting over.
TEST(TrainingTest, ResumeFindsTheNewestValidCheckpointWithoutLatest) {
  TrainOptions o = Synthetic("logreg_fashion", 2);
  o.checkpoint_dir = TempDir("no_latest");
  ASSERT_TRUE(Train(o).ok());
  std::filesystem::remove(o.checkpoint_dir + "/LATEST");
  o.resume = true;
  o.epochs = 3;
  auto resumed = Train(o);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->epochs, 1);  // the third epoch only, after epoch-2.ckpt
  // LATEST (now naming epoch-3) and epoch-3 damaged: back to epoch 2.
  {
    std::fstream f(o.checkpoint_dir + "/epoch-3.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  o.epochs = 4;
  auto again = Train(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epochs, 2);  // epochs 3 and 4
}

TEST(TrainingTest, ResumeWithNothingToResumeFromIsAnError) {
  TrainOptions o = Synthetic("logreg_fashion", 1);
  o.checkpoint_dir = TempDir("nothing_there");
  o.resume = true;
  auto result = Train(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("--resume: no checkpoint in"));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("run without --resume to start from scratch"));
}

// A writer killed mid-write leaves FILE.tmp.<pid>; the next run removes it
// when that process is gone, and keeps a live writer's.
TEST(TrainingTest, StaleTemporaryCheckpointFilesAreRemoved) {
  TrainOptions o = Synthetic("logreg_fashion", 1);
  o.checkpoint_dir = TempDir("stale_tmp");
  std::filesystem::create_directories(o.checkpoint_dir);
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // `child` is now a pid no process has
  const std::string stale = absl::StrCat(o.checkpoint_dir, "/epoch-1.ckpt.tmp.", child);
  const std::string live = absl::StrCat(o.checkpoint_dir, "/epoch-7.ckpt.tmp.", getpid());
  std::ofstream(stale) << "half a checkpoint";
  std::ofstream(live) << "being written";
  ASSERT_TRUE(Train(o).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
}

TEST(TrainingTest, DivergenceIsReportedWithItsStep) {
  TrainOptions o = Synthetic("mlp_fashion", 1);
  o.passes = "autodiff,sgd(lr=1e30)";
  auto result = Train(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("training diverged"));
}

// Two steps at lr 1e6 leave the training loss finite (4e19) and the test
// loss NaN: the run must fail before anything is checkpointed or reported.
TEST(TrainingTest, ADivergedModelIsNotCheckpointed) {
  TrainOptions o = Synthetic("mlp_fashion", 1);
  o.passes = "autodiff,sgd(lr=1e6)";
  o.max_steps = 2;
  o.checkpoint_dir = TempDir("diverged");
  auto result = Train(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("the test loss became nan after epoch 1"));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("nothing was checkpointed"));
  EXPECT_FALSE(std::filesystem::exists(o.checkpoint_dir + "/epoch-1.ckpt"));
}

TEST(TrainingTest, MissingAndCorruptDataFilesNameTheFile) {
  TrainOptions o = Synthetic("mlp_fashion", 1);
  o.dataset = "fashion-mnist";
  o.data_dir = TempDir("no_such_dir");
  auto result = Train(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("no_such_dir/train-images-idx3-ubyte.gz"));

  std::string dir = TempDir("bad_data");
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"}) {
    std::ofstream(dir + "/" + f) << "this is not an IDX file";
  }
  o.data_dir = dir;
  result = Train(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("bad_data/train-images-idx3-ubyte.gz"));
}

TEST(TrainingTest, WorkersOfAMultiWorkerRunNeedARendezvous) {
  TrainOptions o = Synthetic("mlp_fashion", 1);
  o.workers = 4;
  EXPECT_THAT(std::string(Train(o).status().message()), HasSubstr("needs a rendezvous"));
  o.rendezvous = "file:/tmp/unused";
  o.rank = 4;
  EXPECT_THAT(std::string(Train(o).status().message()), HasSubstr("rank 4 is outside [0, 4)"));
}

// The events of a trace file, parsed by protobuf's (strict) JSON parser.
std::vector<google::protobuf::Struct> TraceEvents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::Struct doc;
  auto status = google::protobuf::util::JsonStringToMessage(text.str(), &doc);
  EXPECT_TRUE(status.ok()) << path << ": " << status.ToString();
  std::vector<google::protobuf::Struct> events;
  if (!doc.fields().contains("traceEvents")) return events;
  for (const auto& v : doc.fields().at("traceEvents").list_value().values()) events.push_back(v.struct_value());
  return events;
}

int CountEvents(const std::vector<google::protobuf::Struct>& events, const std::string& name,
                const std::string& category) {
  int n = 0;
  for (const auto& e : events) {
    const auto& f = e.fields();
    n += f.at("ph").string_value() == "X" && f.at("name").string_value() == name && f.contains("cat") &&
         f.at("cat").string_value() == category && f.contains("dur");
  }
  return n;
}

TEST(TrainingTest, TraceHasEveryNodeRunStepsAndEvaluation) {
  TrainOptions o = Synthetic("mlp_fashion", 1);
  o.train_limit = 96;  // 3 steps of 32
  o.test_limit = 64;
  o.trace_path = TempDir("trace.json");
  auto result = Train(o);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<google::protobuf::Struct> events = TraceEvents(o.trace_path);
  EXPECT_EQ(CountEvents(events, "fc1/matmul", "MatMul"), 3 + 1);  // every step, and evaluation's batch
  EXPECT_EQ(CountEvents(events, "step 0", "step"), 1);
  EXPECT_EQ(CountEvents(events, "step 2", "step"), 1);
  EXPECT_EQ(CountEvents(events, "evaluate", "eval"), 1);
}

TEST(TrainingTest, AFailedRunStillWritesItsTrace) {
  TrainOptions o = Synthetic("mlp_fashion", 1);
  o.passes = "autodiff,sgd(lr=1e30)";
  o.trace_path = TempDir("diverged.json");
  ASSERT_FALSE(Train(o).ok());
  EXPECT_GE(CountEvents(TraceEvents(o.trace_path), "step 0", "step"), 1);
}

}  // namespace
}  // namespace nereid
