#include "runtime/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <deque>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/buffer_pool.h"
#include "core/file_io.h"
#include "core/fingerprint.h"
#include "core/json_writer.h"
#include "core/status_macros.h"
#include "core/trace.h"
#include "data/batch_loader.h"
#include "data/datasets.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "runtime/checkpoint.h"
#include "runtime/data_parallel_group.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

bool IsPlanned(const Graph& graph) {
  for (Node* n : graph.nodes()) {
    if (n->op() == "Feedback") return true;
  }
  return false;
}

std::string GraphAttr(const Graph& graph, const char* key) {
  auto it = graph.header().attr().find(key);
  return it == graph.header().attr().end() ? "" : it->second.s();
}

int64_t PeakRssBytes() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

absl::StatusOr<FeedMap> FeedsOf(const data::Batch& batch) {
  FeedMap feeds;
  ASSIGN_OR_RETURN(Tensor images, Tensor::Allocate(DT_FLOAT, batch.image_dims));
  std::memcpy(images.raw(), batch.images.data(), images.num_bytes());
  ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate(DT_INT32, {batch.size}));
  std::memcpy(labels.raw(), batch.labels.data(), labels.num_bytes());
  feeds["images"] = std::move(images);
  feeds["labels"] = std::move(labels);
  return feeds;
}

// A progress bar redrawn in place on a terminal; a plain line every tenth of
// an epoch otherwise (logs, CI).
class Progress {
 public:
  Progress(std::FILE* out, int64_t epochs, int64_t steps_per_epoch)
      : out_(out), tty_(out != nullptr && isatty(fileno(out))), epochs_(epochs), steps_(steps_per_epoch) {}

  void Step(int64_t epoch, int64_t step, double loss, double samples_per_second) {
    if (out_ == nullptr) return;
    absl::Time now = absl::Now();
    bool last = step + 1 == steps_;
    if (tty_) {
      if (!last && now - last_draw_ < absl::Milliseconds(100)) return;
      last_draw_ = now;
      int width = 30, filled = static_cast<int>(width * (step + 1) / std::max<int64_t>(1, steps_));
      std::fprintf(out_, "\repoch %lld/%lld [%s%s] %lld/%lld loss %.4f %.0f samples/s ",
                   static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                   std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
                   static_cast<long long>(step + 1), static_cast<long long>(steps_), loss, samples_per_second);
      std::fflush(out_);
      return;
    }
    int64_t every = std::max<int64_t>(1, steps_ / 10);
    if ((step + 1) % every == 0 || last) {
      std::fprintf(out_, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s\n",
                   static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                   static_cast<long long>(step + 1), static_cast<long long>(steps_), loss, samples_per_second);
      std::fflush(out_);
    }
  }

  void EpochDone(const EpochMetrics& m) {
    if (out_ == nullptr) return;
    std::fprintf(out_, "%sepoch %lld: train loss %.4f, test accuracy %.2f%%, test loss %.4f, %.0f samples/s, %.1f s\n",
                 tty_ ? "\n" : "", static_cast<long long>(m.epoch + 1), m.train_loss, 100 * m.test_accuracy,
                 m.test_loss, m.samples_per_second, m.seconds);
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  bool tty_;
  int64_t epochs_, steps_;
  absl::Time last_draw_ = absl::InfinitePast();
};

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// Each rank evaluates its shard of the test set; the counts are summed over
// the ranks, so every rank reports the whole test set's figures.
absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, const std::string& logits,
                                           const std::string& loss, StepInfo info, DataParallelGroup* group) {
  data::LoaderOptions lo;
  lo.batch_size = options.eval_batch;
  lo.shuffle = false;
  lo.prefetch = 1;
  if (group != nullptr) {
    lo.rank = group->rank();
    lo.world = group->world();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader, data::BatchLoader::Create(test, lo));
  loader->StartEpoch(0);
  info.training = false;
  int64_t correct = 0, seen = 0;
  double loss_sum = 0;
  while (std::optional<data::Batch> batch = loader->Next()) {
    ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch));
    ASSIGN_OR_RETURN(std::vector<Tensor> out, executor.Evaluate(info, feeds, {logits, loss}));
    const Tensor& scores = out[0];
    int64_t k = scores.dim(1);
    for (int64_t i = 0; i < batch->size; ++i) {
      const float* row = scores.data<float>() + i * k;
      int64_t best = std::max_element(row, row + k) - row;
      correct += best == batch->labels[i];
    }
    loss_sum += out[1].data<float>()[0] * batch->size;
    seen += batch->size;
    if (options.report) {
      options.report(absl::StrCat("phase=eval epoch=", info.epoch, " batch=", batch->index_in_epoch));
    }
  }
  if (group != nullptr) {
    std::vector<double> sums = {static_cast<double>(correct), loss_sum, static_cast<double>(seen)};
    RETURN_IF_ERROR(group->SumAcrossRanks(sums));
    correct = static_cast<int64_t>(std::llround(sums[0]));
    loss_sum = sums[1];
    seen = static_cast<int64_t>(std::llround(sums[2]));
  }
  Evaluation e;
  if (seen > 0) {
    e.accuracy = static_cast<double>(correct) / seen;
    e.loss = loss_sum / seen;
  }
  return e;
}

// Calls `tick` every `period` on a thread of its own until destroyed.
class PeriodicReporter {
 public:
  PeriodicReporter(absl::Duration period, std::function<void()> tick)
      : thread_([this, period, tick = std::move(tick)] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!stop_) {
            if (cv_.wait_for(lock, absl::ToChronoNanoseconds(period), [this] { return stop_; })) break;
            lock.unlock();
            tick();
            lock.lock();
          }
        }) {}
  ~PeriodicReporter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Multi-worker runs: node threads yield to communication (ExecutorOptions::
// compute_nice). +5 gives a woken network thread the core at once without
// starving computation of a busy machine's other processes.
constexpr int kComputeNiceWithPeers = 5;

// With several workers and no communication pass, data_parallel goes right
// after autodiff.
std::string PassesFor(const TrainOptions& options) {
  if (options.workers <= 1 || absl::StrContains(options.passes, "data_parallel")) return options.passes;
  size_t at = options.passes.find("autodiff");
  if (at == std::string::npos) return options.passes;
  size_t end = at + std::string("autodiff").size();
  if (end < options.passes.size() && options.passes[end] == '(') end = options.passes.find(')', end) + 1;
  return options.passes.substr(0, end) + ",data_parallel" + options.passes.substr(end);
}

// What every rank must agree on: the plan and the settings that shape the
// run's arithmetic.
std::string PlanFingerprint(const Graph& graph, const TrainOptions& options) {
  std::string text = GraphDefToText(ExportGraph(graph));
  text += absl::StrCat("|batch=", options.batch, "|seed=", options.seed, "|epochs=", options.epochs,
                       "|dataset=", options.dataset, "|train_limit=", options.train_limit);
  return absl::StrCat(absl::Hex(Fnv1a(text), absl::kZeroPad16));
}

// Where rank `rank` keeps its per-rank state: DIR/rank-<r>/epoch-<N>.ckpt.
std::string PerRankCheckpointDir(const std::string& dir, int rank) { return absl::StrCat(dir, "/rank-", rank); }

// Rank 0 writes the shared state; every rank writes its per-rank state (if
// any) beside it, so a resume restores each rank's own residuals.
absl::Status SaveCheckpoints(const TrainOptions& options, int64_t epochs_completed, int64_t step,
                             const Executor& executor, const absl::flat_hash_set<std::string>& per_rank) {
  Checkpoint shared{epochs_completed, step, {}}, mine{epochs_completed, step, {}};
  for (auto& [name, value] : executor.State()) {
    (per_rank.contains(name) ? mine : shared).tensors.emplace_back(name, std::move(value));
  }
  if (!mine.tensors.empty()) {
    RETURN_IF_ERROR(SaveCheckpoint(PerRankCheckpointDir(options.checkpoint_dir, options.rank), mine));
  }
  if (options.rank == 0) RETURN_IF_ERROR(SaveCheckpoint(options.checkpoint_dir, shared));
  return absl::OkStatus();
}

// Restores this rank's per-rank state for the epoch the shared checkpoint
// `at` was written after; its absence is an error, not a silent zero.
absl::Status RestorePerRankState(const TrainOptions& options, const Checkpoint& at, Executor& executor) {
  std::string path = absl::StrCat(PerRankCheckpointDir(options.checkpoint_dir, options.rank), "/epoch-",
                                  at.epochs_completed, ".ckpt");
  absl::StatusOr<Checkpoint> mine = ReadCheckpointFile(path);
  if (!mine.ok()) {
    return absl::Status(mine.status().code(),
                        absl::StrCat("resuming rank ", options.rank, " needs its own state (error-feedback residuals, "
                                     "look-ahead gradients) from ", path, ": ", mine.status().message()));
  }
  if (mine->step != at.step) {
    return absl::DataLossError(absl::StrCat(path, " is at step ", mine->step, " but the shared checkpoint at step ",
                                            at.step));
  }
  for (const auto& [name, value] : mine->tensors) RETURN_IF_ERROR(executor.SetState(name, value));
  return absl::OkStatus();
}

// Train, recording into `trace` (null: no trace).
absl::StatusOr<TrainResult> TrainWith(const TrainOptions& options, TraceRecorder* trace) {
  if (options.threads < 1 || options.batch < 1 || options.epochs < 1 || options.workers < 1) {
    return absl::InvalidArgumentError("--workers, --threads, --batch and --epochs must be >= 1");
  }
  bool distributed = options.workers > 1;
  if (distributed && (options.rank < 0 || options.rank >= options.workers)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is outside [0, ", options.workers, ")"));
  }
  if (distributed && options.rendezvous.empty()) {
    return absl::InvalidArgumentError("a worker of a multi-worker run needs a rendezvous (--rendezvous file:DIR)");
  }
  absl::Time start = absl::Now();
  if (trace != nullptr) trace->NameThisThread("driver");
  TrainResult result;
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel(options.model_path));
  if (!IsPlanned(*graph)) {
    ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, ParsePipeline(PassesFor(options)));
    ASSIGN_OR_RETURN(std::vector<PassReport> reports, RunPipeline(*graph, pipeline));
    for (const PassReport& r : reports) result.plan_summary.emplace_back(r.pass, FormatReport(r));
  }
  result.model = GraphAttr(*graph, "name").empty() ? options.model_path : GraphAttr(*graph, "name");
  std::string logits = GraphAttr(*graph, "logits"), loss = GraphAttr(*graph, "loss");
  if (logits.empty() || loss.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.model_path, ": the graph attributes 'logits' and 'loss' must name the nodes to evaluate"));
  }

  std::unique_ptr<DataParallelGroup> group;
  if (distributed) {
    if (DataParallelGroup::CollectivesPerStep(*graph) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.model_path, " has no gradient communication: plan it with data_parallel to train on ",
          options.workers, " workers"));
    }
    GroupOptions g;
    g.rank = options.rank;
    g.world = options.workers;
    g.rendezvous = options.rendezvous;
    g.run_id = options.run_id;
    g.hostname = options.bind_address;
    g.timeout = options.comm_timeout;
    g.plan_fingerprint = PlanFingerprint(*graph, options);
    if (options.report) options.report("phase=rendezvous");
    ASSIGN_OR_RETURN(group, DataParallelGroup::Join(*graph, g));
    result.strategy = "data_parallel";
  }

  std::string dataset_name = options.dataset.empty() ? GraphAttr(*graph, "dataset") : options.dataset;
  data::DatasetOptions dopts;
  dopts.dir = options.data_dir;
  if (dataset_name == "synthetic") {
    // Synthetic data takes the shape the model's images input declares.
    for (Node* n : graph->nodes()) {
      const auto& attr = n->def().attr();
      if (n->op() != "Input" || !attr.count("feed") || attr.at("feed").s() != "images") continue;
      const TensorShape& s = n->outputs()[0].shape;
      if (s.rank() == 4) {
        dopts.channels = s.dim(1);
        dopts.height = s.dim(2);
        dopts.width = s.dim(3);
      }
    }
    auto classes = graph->header().attr().find("num_classes");
    if (classes != graph->header().attr().end()) dopts.num_classes = static_cast<int>(classes->second.i());
  }
  dopts.seed = options.seed;
  dopts.limit = options.train_limit;
  ASSIGN_OR_RETURN(data::Dataset train_set, data::LoadNamedDataset(dataset_name, data::Split::kTrain, dopts));
  dopts.limit = options.test_limit;
  ASSIGN_OR_RETURN(data::Dataset test_set, data::LoadNamedDataset(dataset_name, data::Split::kTest, dopts));
  auto train = std::make_shared<const data::Dataset>(std::move(train_set));
  auto test = std::make_shared<const data::Dataset>(std::move(test_set));

  ExecutorOptions eopts;
  eopts.threads = options.threads;
  if (group != nullptr) {
    eopts.collectives = group->engine();
    eopts.compute_nice = kComputeNiceWithPeers;
  }
  eopts.trace = trace;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), eopts));
  // Error-feedback residuals: each rank checkpoints and keeps its own.
  const absl::flat_hash_set<std::string> per_rank = DataParallelGroup::PerRankState(*graph);

  data::LoaderOptions lo;
  lo.batch_size = options.batch;
  lo.seed = options.seed;
  lo.rank = options.rank;
  lo.world = options.workers;
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader, data::BatchLoader::Create(train, lo));
  // Ranks step in lock-step: all take as many steps as the smallest shard
  // (N / world examples) gives, so an odd example out is skipped.
  int64_t smallest_shard = train->num_examples / options.workers;
  int64_t steps_per_epoch = (smallest_shard + options.batch - 1) / options.batch;

  int64_t first_epoch = 0, step = 0;
  if (options.resume) {
    if (options.checkpoint_dir.empty()) return absl::InvalidArgumentError("--resume needs --checkpoint DIR");
    absl::StatusOr<Checkpoint> ckpt = LoadLatestCheckpoint(options.checkpoint_dir);
    if (ckpt.ok()) {
      for (const auto& [name, value] : ckpt->tensors) RETURN_IF_ERROR(executor->SetState(name, value));
      if (!per_rank.empty()) RETURN_IF_ERROR(RestorePerRankState(options, *ckpt, *executor));
      first_epoch = ckpt->epochs_completed;
      step = ckpt->step;
      if (options.progress != nullptr) {
        std::fprintf(options.progress, "resuming after epoch %lld (step %lld) from %s\n",
                     static_cast<long long>(first_epoch), static_cast<long long>(step),
                     options.checkpoint_dir.c_str());
      }
    } else if (!absl::IsNotFound(ckpt.status())) {
      return ckpt.status();
    }
  }

  if (group != nullptr) {
    RETURN_IF_ERROR(group->CheckIdenticalState(*executor, per_rank));
    group->engine()->Reset(step);
    group->engine()->set_trace(trace);
  }
  TrafficCounters traffic_in_steps;
  // While this rank waits in a collective for its peers it is not hung: say
  // so every second, so the launcher blames the rank that stopped instead.
  std::unique_ptr<PeriodicReporter> waiting_reporter;
  if (group != nullptr && options.report) {
    CollectiveEngine* engine = group->engine();
    waiting_reporter = std::make_unique<PeriodicReporter>(absl::Seconds(1), [engine, &options] {
      if (std::optional<std::pair<int64_t, int>> key = engine->running()) {
        options.report(absl::StrCat("phase=allreduce step=", key->first, " bucket=", key->second,
                                    " waiting_for_peers"));
      }
    });
  }

  BufferPool::Global().ResetPeak();
  Progress progress(options.rank == 0 ? options.progress : nullptr, options.epochs, steps_per_epoch);
  double train_seconds = 0;
  int64_t train_samples = 0;
  // Pipelined plans (pipeline(width=K)) keep up to K steps in flight: step s
  // starts once step s-K is finished (the tracker's bound; StartStep waits
  // for it), and each step's loss is read when it finishes.
  const int in_flight = executor->tracker().max_steps_in_flight();
  result.pipeline_width = in_flight;
  if (!GraphAttr(*graph, "compression").empty()) result.compression = GraphAttr(*graph, "compression");
  struct StepInFlight {
    int64_t step, epoch, index, examples;
    absl::Time started;
  };
  for (int64_t epoch = first_epoch; epoch < options.epochs; ++epoch) {
    absl::Time epoch_start = absl::Now();
    loader->StartEpoch(epoch);
    double loss_sum = 0;
    int64_t epoch_samples = 0, index = 0;
    std::deque<StepInFlight> flight;
    // On an error (a failed step, a NaN loss), steps still in flight are
    // aborted and waited for, so none outlives the executor.
    absl::Cleanup drain = [&] {
      if (flight.empty()) return;
      executor->Abort(absl::CancelledError("training stopped on an earlier error"));
      for (const StepInFlight& f : flight) executor->FinishStep(f.step).IgnoreError();
    };
    TrafficCounters traffic_at_start;
    if (group != nullptr) traffic_at_start = group->communicator().traffic();
    auto finish_oldest = [&]() -> absl::Status {
      StepInFlight f = flight.front();
      flight.pop_front();
      absl::StatusOr<std::vector<Tensor>> out = executor->FinishStep(f.step);
      if (trace != nullptr) {
        // Overlapping steps cannot share the driver's track.
        std::string name = absl::StrCat("step ", f.step);
        TraceArg args[] = {{"step", f.step}, {"epoch", f.epoch}};
        if (in_flight == 1) {
          trace->Complete(name, "step", f.started, absl::Now(), args);
        } else {
          trace->Async(name, "step", f.started, absl::Now(), args);
        }
      }
      if (!out.ok()) return out.status();
      if (options.report) options.report(absl::StrCat("phase=train epoch=", f.epoch, " step=", f.step));
      float value = (*out)[0].data<float>()[0];
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat("the loss became ", value, " at epoch ", f.epoch + 1,
                                                       ", step ", f.step,
                                                       ": training diverged (try a smaller learning rate)"));
      }
      loss_sum += static_cast<double>(value) * f.examples;
      epoch_samples += f.examples;
      ++result.steps;
      double elapsed = absl::ToDoubleSeconds(absl::Now() - epoch_start);
      progress.Step(epoch, f.index, loss_sum / epoch_samples,
                    elapsed > 0 ? epoch_samples * options.workers / elapsed : 0);
      return absl::OkStatus();
    };
    while (index < steps_per_epoch) {
      if (options.max_steps > 0 && result.steps + static_cast<int64_t>(flight.size()) >= options.max_steps) break;
      std::optional<data::Batch> batch = loader->Next();
      if (!batch) break;
      ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch));
      while (static_cast<int>(flight.size()) >= in_flight) RETURN_IF_ERROR(finish_oldest());
      StepInfo info{epoch, step, index, steps_per_epoch, options.epochs, true};
      flight.push_back({step, epoch, index, batch->size, absl::Now()});
      RETURN_IF_ERROR(executor->StartStep(info, std::move(feeds), {loss}));
      ++step;
      ++index;
    }
    // Evaluation and checkpoints see every step of the epoch applied.
    while (!flight.empty()) RETURN_IF_ERROR(finish_oldest());
    if (group != nullptr) {
      TrafficCounters now = group->communicator().traffic();
      traffic_in_steps.bytes_sent += now.bytes_sent - traffic_at_start.bytes_sent;
      traffic_in_steps.bytes_received += now.bytes_received - traffic_at_start.bytes_received;
    }
    if (group != nullptr) {
      std::vector<double> sums = {loss_sum, static_cast<double>(epoch_samples)};
      RETURN_IF_ERROR(group->SumAcrossRanks(sums));
      loss_sum = sums[0];
      epoch_samples = static_cast<int64_t>(std::llround(sums[1]));
    }
    EpochMetrics m;
    m.epoch = epoch;
    m.seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start);
    m.train_loss = epoch_samples > 0 ? loss_sum / epoch_samples : 0;
    m.samples_per_second = m.seconds > 0 ? epoch_samples / m.seconds : 0;
    train_seconds += m.seconds;
    train_samples += epoch_samples;
    StepInfo eval_info{epoch, step, 0, steps_per_epoch, options.epochs, false};
    TraceSpan eval_span(trace, "evaluate", "eval", {{"epoch", epoch}, {"step", step}});
    ASSIGN_OR_RETURN(Evaluation eval, EvaluateTestSet(*executor, test, options, logits, loss, eval_info, group.get()));
    eval_span.End();
    m.test_accuracy = eval.accuracy;
    m.test_loss = eval.loss;
    progress.EpochDone(m);
    result.per_epoch.push_back(m);
    if (!options.checkpoint_dir.empty()) RETURN_IF_ERROR(SaveCheckpoints(options, epoch + 1, step, *executor, per_rank));
    if (options.max_steps > 0 && result.steps >= options.max_steps) break;
  }
  result.epochs = static_cast<int64_t>(result.per_epoch.size());
  if (!result.per_epoch.empty()) {
    result.final_train_loss = result.per_epoch.back().train_loss;
    result.final_test_accuracy = result.per_epoch.back().test_accuracy;
  }
  result.samples_per_second = train_seconds > 0 ? train_samples / train_seconds : 0;
  result.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.peak_rss_bytes = PeakRssBytes();
  result.peak_tensor_bytes = BufferPool::Global().stats().peak_bytes_in_use;
  result.parameter_fingerprint = DataParallelGroup::StateFingerprint(*executor, per_rank);
  if (group != nullptr) {
    // Summed over the ranks, then averaged per rank and step.
    std::vector<double> sums = {static_cast<double>(traffic_in_steps.bytes_sent),
                                static_cast<double>(traffic_in_steps.bytes_received),
                                absl::ToDoubleSeconds(group->engine()->busy_time()),
                                absl::ToDoubleSeconds(group->engine()->codec_time())};
    RETURN_IF_ERROR(group->SumAcrossRanks(sums));
    if (result.steps > 0) {
      const double per_step = 1.0 / options.workers / result.steps;
      result.bytes_sent_per_step = sums[0] * per_step;
      result.bytes_received_per_step = sums[1] * per_step;
      result.comm_seconds_per_step = sums[2] * per_step;
      result.codec_seconds_per_step = sums[3] * per_step;
    }
    ASSIGN_OR_RETURN(result.layer_bytes, PlanLayerBytes(*graph, options.workers));
  }
  if (!options.metrics_json.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(options.metrics_json, MetricsJson(options, result)));
  }
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options) {
  if (options.trace_path.empty()) return TrainWith(options, nullptr);
  // Outlives everything that records into it: TrainWith has stopped its
  // executor and collective engine when it returns, even on an error.
  TraceRecorder trace(options.rank);
  absl::StatusOr<TrainResult> result = TrainWith(options, &trace);
  absl::Status written = trace.WriteJson(TracePathForRank(options.trace_path, options.rank, options.workers));
  if (result.ok() && !written.ok()) return written;
  return result;
}

std::string MetricsJson(const TrainOptions& options, const TrainResult& r) {
  JsonWriter w;
  w.BeginObject();
  w.Member("model", r.model);
  w.Member("workers", int64_t{options.workers});
  w.Member("rank", int64_t{options.rank});
  w.Member("threads", int64_t{options.threads});
  w.Member("strategy", r.strategy);
  w.Member("passes", PassesFor(options));
  w.Member("pipeline_width", r.pipeline_width);
  w.Member("compression", r.compression);
  w.Member("epochs", r.epochs);
  w.Member("steps", r.steps);
  w.Member("batch_per_worker", options.batch);
  w.Member("seed", static_cast<int64_t>(options.seed));
  w.Member("final_train_loss", r.final_train_loss);
  w.Member("final_test_accuracy", r.final_test_accuracy);
  w.Member("samples_per_second", r.samples_per_second);
  w.Member("wall_seconds", r.wall_seconds);
  w.Member("peak_rss_bytes", r.peak_rss_bytes);
  w.Member("peak_tensor_bytes", r.peak_tensor_bytes);
  w.Member("bytes_sent_per_step", r.bytes_sent_per_step);
  w.Member("bytes_received_per_step", r.bytes_received_per_step);
  w.Member("comm_seconds_per_step", r.comm_seconds_per_step);
  w.Member("codec_seconds_per_step", r.codec_seconds_per_step);
  w.Member("parameter_fingerprint", absl::StrCat(absl::Hex(r.parameter_fingerprint, absl::kZeroPad16)));
  w.Key("layer_bytes");
  w.BeginArray();
  for (const LayerBytes& l : r.layer_bytes) {
    w.BeginObject();
    w.Member("name", l.name);
    w.Member("method", l.method);
    w.Member("collective", l.collective);
    w.Member("elements", l.elements);
    w.Member("payload_bytes", l.payload_bytes);
    w.Key("payload_is_bound");
    w.Bool(l.payload_is_bound);
    w.Member("sent_bytes", l.sent_bytes);
    w.Member("uncompressed_sent_bytes", l.uncompressed_sent_bytes);
    w.EndObject();
  }
  w.EndArray();
  w.Key("per_epoch");
  w.BeginArray();
  for (const EpochMetrics& m : r.per_epoch) {
    w.BeginObject();
    w.Member("epoch", m.epoch + 1);
    w.Member("train_loss", m.train_loss);
    w.Member("test_accuracy", m.test_accuracy);
    w.Member("test_loss", m.test_loss);
    w.Member("samples_per_second", m.samples_per_second);
    w.Member("seconds", m.seconds);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take() + "\n";
}

}  // namespace nereid
