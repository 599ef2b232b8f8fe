// The executor running placed plans on the simulated device's streams
// (schedulers/device_streams.h): every node placed on the sim is enqueued
// behind event waits and computed on the sim's memory, with random delays
// before every launch and copy. The sim runs the CPU's kernels, so a placed
// plan must train bit for bit like the unplaced one on the host, whatever the
// delays and however many compute streams; and when one wait is removed, the
// simulation must notice.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "device/device_registry.h"
#include "ops/live_set.h"
#include "schedulers/executor.h"
#include "schedulers/stream_issued_queue.h"
#include "tests/training/plan_util.h"
#include "tests/training/train_util.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

using testing::FeedsFor;
using testing::Threads;
using testing::Train;
using testing::Trained;
using testing::UnderThreadSanitizer;

bool DeviceRegistryHasNoCuda() {
  const std::vector<std::string> names = DeviceRegistry::Global().Names();
  return std::find(names.begin(), names.end(), "cuda") == names.end();
}

// `more`: further place options (",comm=device").
std::string Placed(const std::string& passes, int streams, int delay_us, int seed, const std::string& more = "") {
  return absl::StrCat(passes, ",place(device=sim,streams=", streams, ",sim_delay_us=", delay_us, ",sim_seed=", seed,
                      more, ")");
}

// Same losses, and every parameter equal bit for bit.
void ExpectSame(const Trained& host, const Trained& sim) {
  ASSERT_TRUE(host.status.ok()) << host.status;
  ASSERT_TRUE(sim.status.ok()) << sim.status;
  ASSERT_EQ(host.losses.size(), sim.losses.size());
  for (size_t t = 0; t < host.losses.size(); ++t) {
    EXPECT_EQ(std::memcmp(&host.losses[t], &sim.losses[t], sizeof(float)), 0)
        << "step " << t << ": host " << host.losses[t] << ", sim " << sim.losses[t];
  }
  ASSERT_EQ(host.state.size(), sim.state.size());
  for (size_t i = 0; i < host.state.size(); ++i) {
    SCOPED_TRACE(host.state[i].first);
    ASSERT_EQ(host.state[i].first, sim.state[i].first);
    EXPECT_TRUE(host.state[i].second.BitwiseEquals(sim.state[i].second));
  }
}

bool Same(const Trained& host, const Trained& sim) {
  if (!sim.status.ok() || host.losses.size() != sim.losses.size()) return false;
  if (std::memcmp(host.losses.data(), sim.losses.data(), host.losses.size() * sizeof(float)) != 0) return false;
  for (size_t i = 0; i < host.state.size(); ++i) {
    if (!host.state[i].second.BitwiseEquals(sim.state[i].second)) return false;
  }
  return true;
}

struct ModelCase {
  std::string model;
  int steps;
  int batch;
};

class EveryModelOnTheSim : public ::testing::TestWithParam<ModelCase> {};

// Adam (state Parameters updated beside the weights) and, for the models
// with batch normalisation, running statistics: every kind of state a model
// carries from step to step crosses the streams.
TEST_P(EveryModelOnTheSim, TrainsBitForBitLikeTheHostOnOneAndThreeStreams) {
  const ModelCase& c = GetParam();
  const std::string passes = "autodiff,adam(lr=0.001)";
  std::vector<FeedMap> feeds = FeedsFor(c.model, c.steps, c.batch);
  Trained host = Train(c.model, passes, feeds);
  ASSERT_TRUE(host.status.ok()) << host.status;
  for (const float loss : host.losses) ASSERT_TRUE(std::isfinite(loss));
  for (int streams : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(streams, " compute streams"));
    Trained sim = Train(c.model, Placed(passes, streams, 50, 1), feeds);
    ExpectSame(host, sim);
    EXPECT_GT(sim.device.launches, 0);
    if (streams == 3) {
      EXPECT_GT(sim.device.cross_stream_waits, 0);
    }
    // The copies between host and device went through pinned blocks, every
    // one of them back in the pool at the end, taken again in later steps.
    EXPECT_GT(sim.device.pinned.acquired, 0);
    EXPECT_EQ(sim.device.pinned.in_use, 0);
    if (c.steps >= 3) {
      EXPECT_GT(sim.device.pinned.reused, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModelOnTheSim,
                         ::testing::Values(ModelCase{"logreg_fashion", 3, 8}, ModelCase{"mlp_fashion", 3, 8},
                                           ModelCase{"lenet_fashion", 3, 4}, ModelCase{"char_transformer", 2, 1},
                                           ModelCase{"resnet20_cifar", 2, 2}),
                         [](const auto& info) { return info.param.model; });

// A plan placed on cuda run by a binary built without CUDA: refused before
// anything runs, saying how to build one that can.
TEST(StreamSchedulerTest, ACudaPlanInABinaryWithoutCudaIsRefusedWithTheReason) {
  if (!DeviceRegistryHasNoCuda()) GTEST_SKIP() << "this binary has the cuda backend";
  auto graph = testing::PlanModel("mlp_fashion", Placed("autodiff,sgd(lr=0.1)", 1, 0, 0));
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (Node* n : (*graph)->nodes()) {
    if (n->def().device() == "sim:0") n->mutable_def()->set_device("cuda:0");
  }
  (*graph)->mutable_header()->mutable_records()->mutable_placement()->set_device("cuda:0");
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_FALSE(executor.ok());
  EXPECT_THAT(std::string(executor.status().message()), HasSubstr("built without CUDA"));
  EXPECT_THAT(std::string(executor.status().message()), HasSubstr("--config=cuda"));
}

// The strategies' plans on one worker (their collectives see a world of
// one), two steps in flight for Pipe-SGD: 20 seeds of the delays each (4
// under a sanitizer, which runs them several times slower), on one and
// three compute streams.
TEST(StreamSchedulerTest, StrategiesAgreeWithTheHostOverTwentyDelaySeeds) {
  const std::vector<std::string> strategies = {
      "autodiff,data_parallel,sgd(lr=0.1,momentum=0.9)",
      "autodiff,data_parallel,compress(method=qsgd,bits=8),sgd(lr=0.1)",
      "autodiff,data_parallel,pipeline(width=2),sgd(lr=0.1)",
  };
  std::vector<FeedMap> feeds = testing::RandomImageFeeds(11, 4, 8);
  for (const std::string& passes : strategies) {
    SCOPED_TRACE(passes);
    Trained host = Train("mlp_fashion", passes, feeds);
    ASSERT_TRUE(host.status.ok()) << host.status;
    const int seeds = std::getenv("NEREID_SANITIZER") != nullptr ? 4 : 20;
    for (int seed = 0; seed < seeds; ++seed) {
      for (int streams : {1, 3}) {
        SCOPED_TRACE(absl::StrCat("seed ", seed, ", ", streams, " streams"));
        ExpectSame(host, Train("mlp_fashion", Placed(passes, streams, 200, seed), feeds));
        // The collectives on a stream of their own, behind waits for the
        // gradients' writes (half the seeds: the same path each time).
        if (seed % 2 == 0) {
          ExpectSame(host, Train("mlp_fashion", Placed(passes, streams, 200, seed, ",comm=device"), feeds));
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// A gradient's copy to the host (for the allreduce) enqueued without its
// wait for the compute stream: the host enqueues it as soon as the gradient's
// kernel is enqueued, usually long before that kernel has run behind the
// rest of the backward pass, so the copy reads the block before it is
// written (poison, or an older step's gradient). The sim's delays make that
// likely in every step; the results must then differ from the host's.
TEST(StreamSchedulerTest, RemovingOneWaitIsCaught) {
  if (UnderThreadSanitizer()) GTEST_SKIP() << "the removed wait is a data race, which ThreadSanitizer reports";
  const std::string passes = "autodiff,data_parallel,sgd(lr=0.1)";
  auto graph = testing::PlanModel("mlp_fashion", Placed(passes, 1, 0, 0));
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::string reader;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() == "CopyToHost" && reader.empty()) reader = n->name();
  }
  ASSERT_FALSE(reader.empty()) << "no copy to the host in the data-parallel plan";
  std::vector<FeedMap> feeds = testing::RandomImageFeeds(5, 3, 8);
  Trained host = Train("mlp_fashion", passes, feeds);
  ASSERT_TRUE(host.status.ok()) << host.status;
  int caught = 0;
  constexpr int kSeeds = 8;
  for (int seed = 0; seed < kSeeds; ++seed) {
    // The same seed with the wait in place agrees with the host.
    ExpectSame(host, Train("mlp_fashion", Placed(passes, 1, 2000, seed), feeds));
    caught += Same(host, Train("mlp_fashion", Placed(passes, 1, 2000, seed), feeds, reader)) ? 0 : 1;
  }
  EXPECT_GT(caught, kSeeds / 2) << "without its wait, '" << reader << "' still computed the host's result in "
                                << kSeeds - caught << " of " << kSeeds << " runs";
}

// A communicator for work that never talks to anyone (the tests below check
// where and in which order collective work runs, not what it computes).
class SilentCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "silent"; }
  absl::Status AllReduce(absl::Span<float>, ReduceOp, const CollectiveOptions&) override { return Unused(); }
  absl::Status ReduceScatter(absl::Span<const float>, absl::Span<float>, ReduceOp, const CollectiveOptions&) override {
    return Unused();
  }
  absl::Status AllGather(absl::Span<const float>, absl::Span<float>, const CollectiveOptions&) override {
    return Unused();
  }
  absl::Status Broadcast(absl::Span<float>, int, const CollectiveOptions&) override { return Unused(); }
  absl::Status Send(absl::Span<const float>, int, const CollectiveOptions&) override { return Unused(); }
  absl::Status Recv(absl::Span<float>, int, const CollectiveOptions&) override { return Unused(); }
  absl::Status Barrier(const CollectiveOptions&) override { return Unused(); }
  absl::Status SendRecv(absl::Span<const float>, int, absl::Span<float>, int, const CollectiveOptions&) override {
    return Unused();
  }
  TrafficCounters traffic() const override { return {}; }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("the silent communicator moves nothing"); }
};

// The worker's queue as its peers make it behave: it issues keys 0..n-1 in
// key order once all n have come, on a thread of its own.
class KeyOrderQueue final : public CollectiveQueue {
 public:
  explicit KeyOrderQueue(int keys) : keys_(keys) {}
  ~KeyOrderQueue() override {
    if (issuer_.joinable()) issuer_.join();
  }
  void Submit(int64_t, int bucket, Work work, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    queued_[bucket] = {std::move(work), std::move(done)};
    if (static_cast<int>(queued_.size()) < keys_) return;
    issuer_ = std::thread([this] {
      for (auto& [key, request] : queued_) request.second(request.first(comm_));
    });
  }
  absl::Duration timeout() const override { return absl::Seconds(30); }
  int world() const override { return 1; }
  void AddCodecTime(absl::Duration) override {}

 private:
  const int keys_;
  SilentCommunicator comm_;
  std::mutex mu_;
  std::map<int, std::pair<Work, Done>> queued_;
  std::thread issuer_;
};

// comm=device: a group's collectives share one stream, which runs them in
// the order the worker's queue issues them, whatever the order their kernels
// were launched in (here the reverse): the launch of each is over once it is
// issued, so none waits on the stream behind one issued after it.
TEST(StreamSchedulerTest, AGroupsCollectivesRunOnOneStreamInTheQueuesOrder) {
  auto graph = testing::PlanModel(
      "mlp_fashion", Placed("autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1)", 2, 200, 3, ",comm=device"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<const Node*> collectives;
  const Node* compute = nullptr;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() == "AllReduce") collectives.push_back(n);
    if (n->op() == "MatMul") compute = n;
  }
  ASSERT_GT(collectives.size(), 2u);
  ASSERT_NE(compute, nullptr);
  DeviceStreamsOptions options;
  options.device = "sim:0";
  options.compute_streams = 2;
  options.delay_us_max = 200;
  auto streams = DeviceStreams::Create(**graph, options);
  ASSERT_TRUE(streams.ok()) << streams.status();
  Stream* comm = (*streams)->StreamOf(*collectives[0]);
  ASSERT_NE(comm, nullptr);
  EXPECT_NE(comm, (*streams)->StreamOf(*compute));
  for (const Node* n : collectives) EXPECT_EQ((*streams)->StreamOf(*n), comm) << n->name();

  const int keys = static_cast<int>(collectives.size());
  KeyOrderQueue queue(keys);
  std::mutex mu;
  std::vector<int> ran;  // keys, in the order their work ran on the stream
  std::vector<std::unique_ptr<StreamIssuedQueue>> issuing(keys);
  std::promise<void> all_issued;
  std::atomic<int> issued{0};
  for (int key = keys - 1; key >= 0; --key) {
    const Node& node = *collectives[key];
    auto start = [&, key](DeviceStreams::Finish finish) {
      issuing[key] = std::make_unique<StreamIssuedQueue>(&queue, comm, KernelStyle::kHostWork, node.name(), finish,
                                                         [](absl::Status s) { ADD_FAILURE() << s; });
      issuing[key]->Submit(
          0, key,
          [&, key](Communicator&) {
            std::lock_guard<std::mutex> lock(mu);
            ran.push_back(key);
            return absl::OkStatus();
          },
          [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
    };
    ASSERT_TRUE((*streams)->LaunchAsync(node, {}, {}, 0, start, [&](absl::Status s) {
                            EXPECT_TRUE(s.ok()) << s;
                            if (++issued == keys) all_issued.set_value();
                          }).ok());
  }
  all_issued.get_future().wait();
  ASSERT_TRUE((*streams)->Synchronize().ok());
  std::vector<int> expected(keys);
  for (int key = 0; key < keys; ++key) expected[key] = key;
  EXPECT_EQ(ran, expected);
}

// A collective queued behind a kernel that will fail would be skipped on its
// stream (a failed stream runs nothing more) and never issued: the run's
// failure (FailPending) ends its launch, once, even when the stream's own
// failure arrives after.
TEST(StreamSchedulerTest, ACollectiveSkippedOnAFailedStreamEndsWithTheRunsFailure) {
  auto graph = testing::PlanModel(
      "mlp_fashion", Placed("autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1)", 1, 0, 0, ",comm=device"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<const Node*> collectives;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() == "AllReduce") collectives.push_back(n);
  }
  ASSERT_GE(collectives.size(), 2u);
  DeviceStreamsOptions options;
  options.device = "sim:0";
  auto streams = DeviceStreams::Create(**graph, options);
  ASSERT_TRUE(streams.ok()) << streams.status();
  // The first collective fails on the stream once the run has failed.
  std::promise<void> run_failed;
  std::shared_future<void> after_failure = run_failed.get_future().share();
  ASSERT_TRUE((*streams)
                  ->Launch(*collectives[0], {}, {}, 0,
                           [after_failure] {
                             after_failure.wait();
                             return absl::UnavailableError("rank 1 is gone");
                           })
                  .ok());
  std::atomic<bool> started{false};
  std::mutex mu;
  std::vector<absl::Status> ended;
  ASSERT_TRUE((*streams)
                  ->LaunchAsync(
                      *collectives[1], {}, {}, 0, [&](DeviceStreams::Finish) { started = true; },
                      [&](absl::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        ended.push_back(std::move(s));
                      })
                  .ok());
  (*streams)->FailPending(absl::AbortedError("the run failed"));
  run_failed.set_value();
  EXPECT_THAT(std::string((*streams)->Synchronize().message()), HasSubstr("rank 1 is gone"));
  (*streams)->FailPending(absl::AbortedError("again"));
  streams->reset();  // joins the watchers: every callback has run
  EXPECT_FALSE(started);
  ASSERT_EQ(ended.size(), 1u) << "a launch ends once";
  EXPECT_THAT(std::string(ended[0].message()), HasSubstr("the run failed"));
}

// A kernel that fails on a compute stream poisons the collective's stream,
// which waits for its output: the collective, skipped there, ends with that
// failure by itself (nothing else would end it before the step's timeout).
TEST(StreamSchedulerTest, ACollectiveWaitingOnAnotherStreamsFailedKernelEndsWithThatFailure) {
  auto graph = testing::PlanModel(
      "mlp_fashion", Placed("autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1)", 1, 0, 0, ",comm=device"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Node* collective = nullptr;
  for (const Node* n : (*graph)->nodes()) {
    if (n->op() == "AllReduce" && collective == nullptr) collective = n;
  }
  ASSERT_NE(collective, nullptr);
  const Node* producer = collective->input_edge(0)->src;
  DeviceStreamsOptions options;
  options.device = "sim:0";
  auto streams = DeviceStreams::Create(**graph, options);
  ASSERT_TRUE(streams.ok()) << streams.status();
  auto written = (*streams)->Allocate(*producer, DT_FLOAT, {4});
  ASSERT_TRUE(written.ok()) << written.status();
  // The kernel fails only once the collective is queued behind it, so the
  // collective's launch is accepted and must end by itself.
  std::promise<void> queued;
  std::shared_future<void> collective_queued = queued.get_future().share();
  ASSERT_TRUE((*streams)
                  ->Launch(*producer, {}, {*written}, 0,
                           [collective_queued] {
                             collective_queued.wait();
                             return absl::InternalError("NaN in the gradient");
                           })
                  .ok());
  std::atomic<bool> started{false};
  std::promise<absl::Status> ended;
  std::future<absl::Status> outcome = ended.get_future();
  const absl::Status launched = (*streams)->LaunchAsync(
      *collective, {*written}, {}, 0, [&](DeviceStreams::Finish) { started = true; },
      [&](absl::Status s) { ended.set_value(std::move(s)); });
  queued.set_value();
  ASSERT_TRUE(launched.ok()) << launched;
  ASSERT_EQ(outcome.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the launch never ended";
  EXPECT_THAT(std::string(outcome.get().message()), HasSubstr("NaN in the gradient"));
  EXPECT_FALSE(started);
}

// Blocks come back to the allocator's cache and serve the next steps: the
// device's reserved memory stops growing after the first steps; the host
// waits for the device only at copies out and once per step.
TEST(StreamSchedulerTest, MemoryIsReusedAcrossStepsAndTheHostWaitsOnlyWhereItReads) {
  const std::string passes = "autodiff,data_parallel,sgd(lr=0.1,momentum=0.9)";
  auto graph = testing::PlanModel("lenet_fashion", Placed(passes, 3, 0, 0));
  ASSERT_TRUE(graph.ok()) << graph.status();
  int copies_out = 0;
  for (const Node* n : (*graph)->nodes()) copies_out += n->op() == "CopyToHost" ? 1 : 0;
  ASSERT_GT(copies_out, 0) << "the allreduce's inputs leave the device";
  TraceRecorder trace;
  ExecutorOptions options;
  options.threads = Threads();
  options.trace = &trace;
  auto executor = Executor::Create(graph->get(), options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  std::vector<FeedMap> feeds = testing::RandomImageFeeds(2, 8, 8);
  std::vector<int64_t> reserved;
  int64_t waits_before = 0;
  for (int t = 0; t < 8; ++t) {
    auto loss = (*executor)->RunStep(StepInfo{0, t, t, 8, 1, true}, feeds[t], {"loss"});
    ASSERT_TRUE(loss.ok()) << loss.status();
    const DeviceStreamsStats stats = (*executor)->device()->stats();
    reserved.push_back(stats.memory.peak_bytes_reserved);
    if (t == 6) waits_before = stats.host_waits;
    if (t == 7) {
      // One wait per copy out, one Synchronize and one Download of the loss per step.
      EXPECT_EQ(stats.host_waits - waits_before, copies_out + 2);
    }
    EXPECT_GT(stats.memory.cache_hits, 0) << "step " << t;
  }
  EXPECT_EQ(reserved[3], reserved[7]) << "the device's memory grew after step 3";
  // The trace has a track per stream with its kernels and copies, and every
  // wait of the host for the device.
  const std::string json = trace.ToJson();
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t at = json.find(needle); at != std::string::npos; at = json.find(needle, at + 1)) ++n;
    return n;
  };
  for (const char* track : {"sim:0/compute0", "sim:0/compute2", "sim:0/copy_in", "sim:0/copy_out"}) {
    EXPECT_EQ(count(absl::StrCat("\"name\":\"", track, "\"")), 1) << track;
  }
  EXPECT_GT(count("\"cat\":\"kernel\""), 8 * 10);
  EXPECT_GT(count("\"cat\":\"copy\""), 8 * copies_out);
  EXPECT_EQ(count("\"cat\":\"sync\""), (*executor)->device()->stats().host_waits);
}

// A GPU kernel's own wait for its stream inside a launch (a size it reads
// back: DeviceLaunch::host_wait) is counted and traced as the scheduler's
// waits are, and its failure comes back.
TEST(StreamSchedulerTest, AKernelsOwnHostWaitIsCountedAndTraced) {
  auto graph = testing::PlanModel("mlp_fashion", Placed("autodiff,sgd(lr=0.1)", 1, 0, 0));
  ASSERT_TRUE(graph.ok()) << graph.status();
  TraceRecorder trace;
  DeviceStreamsOptions options;
  options.device = "sim:0";
  options.trace = &trace;
  auto streams = DeviceStreams::Create(**graph, options);
  ASSERT_TRUE(streams.ok()) << streams.status();
  const int64_t before = (*streams)->stats().host_waits;
  bool waited = false;
  EXPECT_TRUE((*streams)
                  ->KernelHostWait("reading the codes' lengths",
                                   [&] {
                                     waited = true;
                                     return absl::OkStatus();
                                   })
                  .ok());
  EXPECT_TRUE(waited);
  const absl::Status failed =
      (*streams)->KernelHostWait("reading a flag", [] { return absl::InternalError("the stream failed"); });
  EXPECT_THAT(std::string(failed.message()), HasSubstr("the stream failed"));
  EXPECT_EQ((*streams)->stats().host_waits - before, 2);
  const std::string json = trace.ToJson();
  EXPECT_THAT(json, HasSubstr("\"name\":\"reading the codes' lengths\",\"cat\":\"sync\""));
  EXPECT_THAT(json, HasSubstr("\"name\":\"reading a flag\",\"cat\":\"sync\""));
}

// The device memory a vgg11 step takes, against the plan's prediction
// (ops/live_set.h) of the device-placed values' live set in the executor's
// order: blocks in use at the peak within 10% of it (1.01x). What the caching
// allocator keeps reserved on a device with room to spare is more (1.17x:
// cached pieces that no request of the moment fits). On a device with only
// 10% more memory than the live set, it gives its cache back when it runs
// out and the steps compute the same losses; with less than the live set,
// the step fails naming the node that found no memory.
TEST(StreamSchedulerTest, Vgg11DeviceMemoryIsThePlansLiveSet) {
  constexpr int kBatch = 8, kSteps = 3;
  const std::string passes = "autodiff,sgd(lr=0.01,momentum=0.9)";
  std::vector<FeedMap> feeds = testing::RandomImageFeeds(3, kSteps, kBatch, {3, 32, 32});
  struct Run {
    absl::Status status;
    std::vector<float> losses;
    AllocatorStats memory;
    std::vector<int64_t> released;  // segments given back by the end of each step
  };
  auto run = [&](double memory_mb) {
    Run r;
    auto graph = testing::PlanModel("vgg11_cifar", absl::StrCat(passes, ",place(device=sim,sim_memory_mb=", memory_mb, ")"));
    if (!graph.ok()) return Run{graph.status()};
    ExecutorOptions options;
    options.threads = 1;  // the order the prediction replays
    auto executor = Executor::Create(graph->get(), options);
    if (!executor.ok()) return Run{executor.status()};
    for (int t = 0; t < kSteps; ++t) {
      auto loss = (*executor)->RunStep(StepInfo{0, t, t, kSteps, 1, true}, feeds[t], {"loss"});
      if (!loss.ok()) {
        r.status = loss.status();
        break;
      }
      r.losses.push_back((*loss)[0].data<float>()[0]);
      r.released.push_back((*executor)->device()->stats().memory.segments_released);
    }
    r.memory = (*executor)->device()->stats().memory;
    return r;
  };
  auto graph = testing::PlanModel("vgg11_cifar", absl::StrCat(passes, ",place(device=sim)"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::string device = (*graph)->header().records().placement().device();
  auto predicted = PredictStepLiveSet(**graph, kBatch, CachingAllocator::kGranularity,
                                      [&](const Node& n) { return n.def().device() == device; });
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  const double plan = static_cast<double>(predicted->peak_bytes);
  const double plan_mb = plan / (1 << 20);

  const Run roomy = run(0);
  ASSERT_TRUE(roomy.status.ok()) << roomy.status;
  const double in_use = static_cast<double>(roomy.memory.peak_bytes_in_use);
  const double reserved = static_cast<double>(roomy.memory.peak_bytes_reserved);
  std::cout << "vgg11, batch " << kBatch << ": predicted " << plan_mb << " MiB (state "
            << predicted->state_bytes / double(1 << 20) << " MiB, peak after " << predicted->peak_after
            << "); in use " << in_use / (1 << 20) << " MiB, reserved " << reserved / (1 << 20) << " MiB\n";
  EXPECT_NEAR(in_use / plan, 1.0, 0.10);
  EXPECT_LT(reserved / plan, 1.25);
  EXPECT_EQ(roomy.memory.segments_released, 0);

  const double tight_mb = std::ceil(1.10 * plan_mb);
  const Run tight = run(tight_mb);
  ASSERT_TRUE(tight.status.ok()) << tight.status;
  std::cout << "on a sim with " << tight_mb << " MiB: reserved " << tight.memory.peak_bytes_reserved / double(1 << 20)
            << " MiB; segments given back by the end of each step: " << absl::StrJoin(tight.released, ", ") << "\n";
  EXPECT_EQ(tight.losses, roomy.losses);
  EXPECT_LE(tight.memory.peak_bytes_reserved, static_cast<int64_t>(tight_mb * (1 << 20)));
  EXPECT_GT(tight.memory.segments_released, 0) << "the cache never had to go back: the test shows nothing";
  // Once a step has run within the device, the layout settles: the last
  // step gives nothing back (each give-back waits for the device).
  EXPECT_EQ(tight.released.back(), tight.released[kSteps - 2]);

  const Run short_of_memory = run(std::floor(0.9 * plan_mb));
  EXPECT_EQ(short_of_memory.status.code(), absl::StatusCode::kResourceExhausted) << short_of_memory.status;
  EXPECT_THAT(std::string(short_of_memory.status.message()), HasSubstr("out of memory"));
  EXPECT_THAT(std::string(short_of_memory.status.message()), HasSubstr("at step 0"));  // the node, where
}

}  // namespace
}  // namespace nereid
