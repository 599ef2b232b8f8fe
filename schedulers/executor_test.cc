// The executor on its own: small graphs written inline, run step by step.
// Training runs over real models are in tests/training/.

#include "schedulers/executor.h"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/initializers.h"
#include "gmock/gmock.h"
#include "graph/graph_io.h"
#include "gtest/gtest.h"
#include "ops/kernel.h"
#include "ops/model_loader.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// A test op: one input, one output of its shape.
OpDefBuilder TestOp(const char* name, const char* summary) {
  return OpDefBuilder(name).Summary(summary).Input("x").Output("y").SetShapeFn(shape_fns::UnchangedShape);
}

// A communication node that fails from another thread, as a collective whose
// peer died does: its callback comes from the communicator's thread.
class FailsFromAnotherThreadKernel : public AsyncOpKernel {
 public:
  void ComputeAsync(OpKernelContext*, std::function<void(absl::Status)> done) override {
    std::thread([done = std::move(done)] { done(absl::UnavailableError("the peer is gone")); }).detach();
  }
};

NEREID_REGISTER_OP(TestOp("TestFailsFromAnotherThread", "Fails asynchronously (executor_test only)."));
NEREID_REGISTER_KERNEL("TestFailsFromAnotherThread", kCpu, DT_FLOAT, FailsFromAnotherThreadKernel);

// What the core-reservation test's nodes saw, shared by its kernels.
struct CoreLog {
  std::mutex mu;
  std::condition_variable arrived;
  std::map<int64_t, int> meets_started;  // by step
  int light_running = 0;
  int most_light_at_step_0 = 0;
  int light_that_met = 0;               // light nodes that saw their partner running
  std::vector<int> heavy_threads;       // by step
  int heavy_beside_light = 0;           // heavy runs during which a light node ran
};
CoreLog& TheCoreLog() {
  static CoreLog* log = new CoreLog();
  return *log;
}

// A light node (it never asks for threads, so it needs one core). After step
// 0 it waits, up to 10 s, for the step's other light node to start: they meet
// only if two nodes truly run at once.
class TestMeetKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    CoreLog& log = TheCoreLog();
    std::unique_lock<std::mutex> lock(log.mu);
    ++log.light_running;
    const int64_t step = ctx->step().step;
    if (step == 0) {
      log.most_light_at_step_0 = std::max(log.most_light_at_step_0, log.light_running);
    } else {
      ++log.meets_started[step];
      log.arrived.notify_all();
      if (log.arrived.wait_for(lock, std::chrono::seconds(10), [&] { return log.meets_started[step] == 2; })) {
        ++log.light_that_met;
      }
    }
    --log.light_running;
    return ctx->SetOutput(0, ctx->input(0));
  }
};

// A heavy node: work enough for every core.
class TestHeavyKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const int threads = ctx->AcquireThreads(int64_t{1} << 20, 1);
    CoreLog& log = TheCoreLog();
    std::lock_guard<std::mutex> lock(log.mu);
    log.heavy_threads.push_back(threads);
    if (log.light_running > 0) ++log.heavy_beside_light;
    return ctx->SetOutput(0, ctx->input(0));
  }
};

NEREID_REGISTER_OP(TestOp("TestMeet", "Waits for its partner to run (executor_test only)."));
NEREID_REGISTER_KERNEL("TestMeet", kCpu, DT_FLOAT, TestMeetKernel);
NEREID_REGISTER_OP(TestOp("TestHeavy", "Asks for every core (executor_test only)."));
NEREID_REGISTER_KERNEL("TestHeavy", kCpu, DT_FLOAT, TestHeavyKernel);

// A counter loop: c(t+1) = c(t) + x(t), c(0) = 0, with `in_flight` steps
// allowed at once. `out` = c + x is what a step computes.
std::string CounterLoop(int in_flight) {
  return absl::StrCat(R"pb(
    version: 1
    loop { name: "train" feedback: "c/next" max_in_flight: )pb",
                      in_flight, R"pb( }
    node {
      name: "x"
      op: "Input"
      attr { key: "shape" value { shape { dim: 2 } } }
      attr { key: "feed" value { s: "x" } }
    }
    node {
      name: "c"
      op: "Parameter"
      input: "c/next"
      attr { key: "shape" value { shape { dim: 2 } } }
      attr { key: "init" value { tensor { dtype: DT_FLOAT shape { dim: 2 } init { kind: "zeros" } } } }
    }
    node { name: "out" op: "Add" input: "c" input: "x" }
    node {
      name: "c/next"
      op: "Feedback"
      input: "out"
      attr { key: "loop" value { s: "train" } }
      attr { key: "shape" value { shape { dim: 2 } } }
    }
  )pb");
}

absl::StatusOr<std::unique_ptr<Graph>> Load(const std::string& text) {
  absl::StatusOr<GraphFile> file = ParseGraphText(text, "executor_test.pbtxt");
  if (!file.ok()) return file.status();
  return LoadModel(*file);
}

// A graph of the fed input "x" ([2]) and `nodes`.
std::string WithInputX(const std::string& nodes) {
  return absl::StrCat(R"pb(
    version: 1
    node {
      name: "x"
      op: "Input"
      attr { key: "shape" value { shape { dim: 2 } } }
      attr { key: "feed" value { s: "x" } }
    }
  )pb", nodes);
}

FeedMap FeedOf(float a, float b) {
  absl::StatusOr<Tensor> x = Tensor::FromVector({2}, {a, b});
  return FeedMap{{"x", *x}};
}

std::vector<float> Values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + 2); }

TEST(ExecutorTest, ParametersFollowTheirFeedbackAcrossSteps) {
  auto graph = Load(CounterLoop(1));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  for (int s = 0; s < 3; ++s) {
    auto out = (*executor)->RunStep(StepInfo{0, s, s, 3, 1, true}, FeedOf(1, 10), {"out"});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{s + 1.0f, 10.0f * (s + 1)})) << "step " << s;
  }
  // State() is the value after the last completed step.
  auto state = (*executor)->State();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "c");
  EXPECT_EQ(Values(state[0].second), (std::vector<float>{3, 30}));
}

// A parameter server's pieces start from their part of the full tensor's
// initial value. The full values are drawn once per tensor and reused for
// its pieces (a few kept at a time): here six tensors' pieces interleave,
// more than are kept, so reuse, eviction and drawing again all happen.
TEST(ExecutorTest, PiecesStartFromTheirPartOfTheFullInitialValue) {
  constexpr int kTensors = 6, kPieces = 3, kPieceSize = 8;
  auto init_of = [](int tensor) {
    return absl::StrCat("tensor { dtype: DT_FLOAT init { kind: \"he_normal\" seed: ", 100 + tensor, " } }");
  };
  std::string nodes;
  for (int order : {0, 1, 2}) {  // pieces 0 of every tensor, then 2, then 1
    const int piece = order == 0 ? 0 : order == 1 ? 2 : 1;
    for (int tensor = 0; tensor < kTensors; ++tensor) {
      absl::StrAppend(&nodes, "node { name: \"w", tensor, "/piece", piece, R"pb(" op: "Parameter"
        attr { key: "shape" value { shape { dim: 8 } } }
        attr { key: "init_of_shape" value { shape { dim: 6 dim: 4 } } }
        attr { key: "init_offset" value { i: )pb", piece * kPieceSize, " } }\n attr { key: \"init\" value { ",
                      init_of(tensor), " } } }\n");
    }
  }
  auto graph = Load(absl::StrCat("version: 1\n", nodes));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  std::map<std::string, Tensor> state;
  for (auto& [name, value] : (*executor)->State()) state[name] = value;
  ASSERT_EQ(state.size(), static_cast<size_t>(kTensors * kPieces));
  for (int tensor = 0; tensor < kTensors; ++tensor) {
    TensorProto init;
    init.set_dtype(DT_FLOAT);
    init.mutable_init()->set_kind("he_normal");
    init.mutable_init()->set_seed(100 + tensor);
    auto full = MaterializeTensor(init, TensorShape({6, 4}));
    ASSERT_TRUE(full.ok()) << full.status();
    for (int piece = 0; piece < kPieces; ++piece) {
      const Tensor& value = state.at(absl::StrCat("w", tensor, "/piece", piece));
      ASSERT_EQ(value.num_elements(), kPieceSize);
      for (int i = 0; i < kPieceSize; ++i) {
        EXPECT_EQ(value.data<float>()[i], full->data<float>()[piece * kPieceSize + i])
            << "tensor " << tensor << " piece " << piece << " element " << i;
      }
    }
    // Different seeds, different tensors: a piece cannot pass by copying another's.
    if (tensor > 0) {
      EXPECT_NE(state.at(absl::StrCat("w", tensor, "/piece0")).data<float>()[0], state.at("w0/piece0").data<float>()[0]);
    }
  }
}

// A Parameter without a `next` input (no Feedback) keeps its value at every
// step; the second step used to wait for a Feedback that never came.
TEST(ExecutorTest, AParameterWithoutFeedbackKeepsItsValue) {
  auto graph = Load(WithInputX(R"pb(
    node {
      name: "k"
      op: "Parameter"
      attr { key: "shape" value { shape { dim: 2 } } }
      attr { key: "trainable" value { b: false } }
      attr { key: "init" value { tensor { dtype: DT_FLOAT shape { dim: 2 } init { kind: "ones" } } } }
    }
    node { name: "out" op: "Add" input: "k" input: "x" }
  )pb"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  ExecutorOptions options;
  options.step_timeout = absl::Seconds(20);
  auto executor = Executor::Create(graph->get(), options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  for (int s = 0; s < 3; ++s) {
    auto out = (*executor)->RunStep(StepInfo{0, s, s, 3, 1, true}, FeedOf(s, 10), {"out"});
    ASSERT_TRUE(out.ok()) << "step " << s << ": " << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{s + 1.0f, 11.0f})) << "step " << s;
  }
}

TEST(ExecutorTest, EvaluationReadsTheStateWithoutChangingIt) {
  auto graph = Load(CounterLoop(1));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  ASSERT_TRUE((*executor)->RunStep(StepInfo{0, 0, 0, 1, 1, true}, FeedOf(2, 3), {"out"}).ok());
  for (int i = 0; i < 2; ++i) {
    auto out = (*executor)->Evaluate(StepInfo{0, 1, 0, 1, 1, false}, FeedOf(1, 1), {"out"});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{3, 4}));
  }
  EXPECT_EQ(Values((*executor)->State()[0].second), (std::vector<float>{2, 3}));
}

// With two steps allowed in flight the driver may start step s+1 before
// finishing step s; the results are those of running them one by one.
TEST(ExecutorTest, OverlappedStepsGiveTheSequentialResults) {
  auto graph = Load(CounterLoop(2));
  ASSERT_TRUE(graph.ok()) << graph.status();
  ExecutorOptions options;
  options.threads = 2;
  auto executor = Executor::Create(graph->get(), options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  EXPECT_EQ((*executor)->tracker().max_steps_in_flight(), 2);
  ASSERT_TRUE((*executor)->StartStep(StepInfo{0, 0, 0, 4, 1, true}, FeedOf(1, 1), {"out"}).ok());
  for (int s = 1; s < 4; ++s) {
    ASSERT_TRUE((*executor)->StartStep(StepInfo{0, s, s, 4, 1, true}, FeedOf(1, 1), {"out"}).ok());
    auto out = (*executor)->FinishStep(s - 1);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{float(s), float(s)}));
  }
  auto last = (*executor)->FinishStep(3);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(Values((*last)[0]), (std::vector<float>{4, 4}));
}

TEST(ExecutorTest, AMissingFeedNamesTheNode) {
  auto graph = Load(CounterLoop(1));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  auto out = (*executor)->RunStep(StepInfo{0, 0, 0, 1, 1, true}, FeedMap{}, {"out"});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("'x'"));
}

TEST(ExecutorTest, AbortFailsTheStepsInFlight) {
  auto graph = Load(CounterLoop(2));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  ASSERT_TRUE((*executor)->StartStep(StepInfo{0, 0, 0, 2, 1, true}, FeedOf(1, 1), {"out"}).ok());
  (*executor)->Abort(absl::CancelledError("stopped by the test"));
  // The step either finished before the abort or reports it; a later step fails.
  (*executor)->FinishStep(0).IgnoreError();
  absl::Status next = (*executor)->StartStep(StepInfo{0, 1, 1, 2, 1, true}, FeedOf(1, 1), {"out"});
  if (next.ok()) next = (*executor)->FinishStep(1).status();
  EXPECT_THAT(std::string(next.message()), HasSubstr("stopped by the test"));
}

// The step's failure is returned while the failing callback may still be
// inside the executor; destroying the executor right then must wait for it.
// The window is narrow (a multi-process run under ASan on a loaded machine
// once hit a use after free in Executor::Fail there), so this runs it often.
TEST(ExecutorTest, AnExecutorDestroyedRightAfterAFailedStepOutlivesTheFailingCallback) {
  auto graph = Load(WithInputX(R"pb(node { name: "y" op: "TestFailsFromAnotherThread" input: "x" })pb"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int i = 0; i < 500; ++i) {
    auto executor = Executor::Create(graph->get(), ExecutorOptions{});
    ASSERT_TRUE(executor.ok()) << executor.status();
    auto out = (*executor)->RunStep(StepInfo{0, 0, 0, 1, 1, true}, FeedOf(1, 2), {"y"});
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("the peer is gone"));
  }
}

// Cores are reserved per node, not borrowed from whatever is idle: two light
// nodes run at once on two threads, a heavy node gets both cores every step
// and never runs beside a light one, and a node's first run (whose need is
// not known yet) holds every core.
TEST(ExecutorTest, EachNodeRunsOnTheCoresItNeedsAndTwoLightNodesRunAtOnce) {
  auto graph = Load(WithInputX(R"pb(
    node { name: "a" op: "TestMeet" input: "x" }
    node { name: "heavy" op: "TestHeavy" input: "x" }
    node { name: "b" op: "TestMeet" input: "x" }
  )pb"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  ExecutorOptions options;
  options.threads = 2;
  auto executor = Executor::Create(graph->get(), options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  constexpr int kSteps = 4;
  for (int s = 0; s < kSteps; ++s) {
    auto out = (*executor)->RunStep(StepInfo{0, s, s, kSteps, 1, true}, FeedOf(1, 2), {"a", "b", "heavy"});
    ASSERT_TRUE(out.ok()) << out.status();
  }
  CoreLog& log = TheCoreLog();
  std::lock_guard<std::mutex> lock(log.mu);
  EXPECT_EQ(log.most_light_at_step_0, 1);
  EXPECT_EQ(log.light_that_met, 2 * (kSteps - 1));
  EXPECT_EQ(log.heavy_threads, std::vector<int>(kSteps, 2));
  EXPECT_EQ(log.heavy_beside_light, 0);
}

}  // namespace
}  // namespace nereid
