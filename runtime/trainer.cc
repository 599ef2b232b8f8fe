#include "runtime/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/buffer_pool.h"
#include "core/file_io.h"
#include "core/fingerprint.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/trace.h"
#include "comm/fault_plan.h"
#include "core/version.h"
#include "data/batch_loader.h"
#include "data/datasets.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "graph/plan_io.h"
#include "graph/process_groups.h"
#include "ops/collective_schedule.h"
#include "ops/model_loader.h"
#include "ops/trainability.h"
#include "ops/op_registry.h"
#include "ops/placement_propagation.h"
#include "plan/split_by_rank.h"
#include "plan/build_plan.h"
#include "plan/plan_file.h"
#include "passes/pass_manager.h"
#include "passes/pass_properties.h"
#include "compress/departure_plan.h"
#include "compress/linear_code.h"
#include "ops/coded_round_stats.h"
#include "runtime/batch_feeds.h"
#include "runtime/checkpoint.h"
#include "runtime/coded_partitions.h"
#include "runtime/step_log.h"
#include "runtime/data_parallel_group.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

// The gossip pass's push-sum weight (per rank, state).
constexpr char kPushSumWeight[] = "gossip/weight";

int64_t PeakRssBytes() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// An epoch's figures as the metrics and the step log write them.
Json EpochJson(const EpochMetrics& m) {
  Json epoch;
  epoch["epoch"] = m.epoch + 1;
  epoch["train_loss"] = m.train_loss;
  epoch["test_accuracy"] = m.test_accuracy;
  epoch["test_loss"] = m.test_loss;
  epoch["samples_per_second"] = m.samples_per_second;
  epoch["seconds"] = m.seconds;
  if (m.consensus_distance >= 0) epoch["consensus_distance"] = m.consensus_distance;
  if (m.coded_present >= 0) {
    epoch["coded_workers_present"] = m.coded_present;
    epoch["coded_results_decoded"] = m.coded_used;
  }
  return epoch;
}

// A progress bar redrawn in place on a terminal; a plain line every tenth of
// an epoch otherwise (logs, CI).
class Progress {
 public:
  // `max_steps` > 0 ends the run early: the totals shown say so.
  Progress(std::FILE* out, int64_t epochs, int64_t steps_per_epoch, int64_t max_steps)
      : out_(out),
        tty_(out != nullptr && isatty(fileno(out))),
        epochs_(epochs),
        steps_(steps_per_epoch),
        total_(max_steps > 0 ? std::min(max_steps, epochs * steps_per_epoch) : epochs * steps_per_epoch),
        start_(absl::Now()) {}

  // Steps the run takes in all (max_steps honoured).
  int64_t total() const { return total_; }

  void Step(int64_t epoch, int64_t step, double loss, double samples_per_second) {
    if (out_ == nullptr) return;
    absl::Time now = absl::Now();
    // This epoch's steps: all of them, or those before max_steps ends the run.
    const int64_t in_epoch = std::max<int64_t>(1, std::min(steps_, total_ - epoch * steps_));
    const int64_t done = epoch * steps_ + step + 1;
    bool last = step + 1 == in_epoch;
    if (first_done_ < 0) first_done_ = done - 1;  // a resumed run starts mid-way
    if (tty_) {
      if (!last && now - last_draw_ < absl::Milliseconds(100)) return;
      last_draw_ = now;
      const std::string eta = Eta(now, done);
      int width = 30, filled = static_cast<int>(width * (step + 1) / in_epoch);
      std::fprintf(out_, "\repoch %lld/%lld [%s%s] %lld/%lld loss %.4f %.0f samples/s %s ",
                   static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                   std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
                   static_cast<long long>(step + 1), static_cast<long long>(in_epoch), loss, samples_per_second,
                   eta.c_str());
      std::fflush(out_);
      return;
    }
    int64_t every = std::max<int64_t>(1, in_epoch / 10);
    if ((step + 1) % every == 0 || last) {
      const std::string eta = Eta(now, done);
      std::fprintf(out_, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s %s\n",
                   static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                   static_cast<long long>(step + 1), static_cast<long long>(in_epoch), loss, samples_per_second,
                   eta.c_str());
      std::fflush(out_);
    }
  }

  // A line of its own, whatever the bar is doing.
  void Warn(const std::string& text) {
    if (out_ == nullptr) return;
    std::fprintf(out_, "%swarning: %s\n", tty_ ? "\n" : "", text.c_str());
    std::fflush(out_);
  }

  void EpochDone(const EpochMetrics& m) {
    if (out_ == nullptr) return;
    std::string consensus =
        m.consensus_distance >= 0 ? absl::StrFormat(", consensus distance %.2e", m.consensus_distance) : "";
    if (m.coded_present >= 0) {
      absl::StrAppendFormat(&consensus, ", %.1f workers present, decoded from %.1f", m.coded_present,
                            m.coded_used);
    }
    std::fprintf(out_, "%sepoch %lld: train loss %.4f, test accuracy %.2f%%, test loss %.4f%s, %.0f samples/s, %.1f s\n",
                 tty_ ? "\n" : "", static_cast<long long>(m.epoch + 1), m.train_loss, 100 * m.test_accuracy,
                 m.test_loss, consensus.c_str(), m.samples_per_second, m.seconds);
    std::fflush(out_);
  }

 private:
  // "ETA 1m05s" for the run's remaining steps at the pace of the steps this
  // process ran (evaluation between epochs not counted); "" once done.
  std::string Eta(absl::Time now, int64_t done) const {
    if (done >= total_ || done <= first_done_) return "";
    const double per_step = absl::ToDoubleSeconds(now - start_) / static_cast<double>(done - first_done_);
    const int64_t seconds = static_cast<int64_t>(std::ceil(per_step * static_cast<double>(total_ - done)));
    if (seconds < 60) return absl::StrCat("ETA ", seconds, "s");
    if (seconds < 3600) return absl::StrFormat("ETA %lldm%02llds", static_cast<long long>(seconds / 60),
                                               static_cast<long long>(seconds % 60));
    return absl::StrFormat("ETA %lldh%02lldm", static_cast<long long>(seconds / 3600),
                           static_cast<long long>(seconds % 3600 / 60));
  }

  std::FILE* out_;
  bool tty_;
  int64_t epochs_, steps_, total_;
  int64_t first_done_ = -1;  // steps done before this process's first
  absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
};

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// What this rank's part of the plan computes in evaluation: the scores
// (logits and loss; empty where another rank holds them), and the Sends that
// feed another rank's scores.
struct EvaluationPart {
  std::string logits, loss;
  std::vector<std::string> sends;
};

// The data shard a rank reads: ranks whose parts of a placed plan form one
// model read the same batches (graph attribute data_replicas: how many
// copies of the model the ranks hold; default: one per rank).
struct DataShard {
  int index = 0, count = 1;
};
// Ranks from world - servers on (graph attribute servers: the parameter
// server's) read no data; they step with shard 0.
absl::StatusOr<DataShard> DataShardOf(const Graph& graph, int rank, int world) {
  const int64_t servers = GraphAttrInt(graph, "servers", 0);
  const int64_t readers = world - servers;
  const int64_t replicas = GraphAttrInt(graph, "data_replicas", readers);
  if (servers < 0 || readers < 1 || replicas < 1 || replicas > readers || readers % replicas != 0) {
    return absl::InvalidArgumentError(absl::StrCat("graph attribute data_replicas is ", replicas,
                                                   ": it must divide the ", readers, " ranks that read data"));
  }
  return DataShard{rank < readers ? static_cast<int>(rank % replicas) : 0, static_cast<int>(replicas)};
}

// Whether the plan declares process groups: their collectives exchange
// batches, so every rank's must be the same size. From the whole plan, so
// every rank decides alike (a rank need not be in every group).
bool EqualShards(const Graph& graph) { return !GraphAttr(graph, "groups").empty(); }

// Each rank evaluates its shard of the test set; the counts are summed over
// the ranks, so every rank reports the whole test set's figures.
absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, const EvaluationPart& part,
                                           DataShard shard, bool equal_shards, StepInfo info,
                                           DataParallelGroup* group, const FeedLayout& layout) {
  data::LoaderOptions lo;
  lo.batch_size = options.eval_batch;
  lo.shuffle = false;
  lo.prefetch = 1;
  if (group != nullptr) {
    lo.rank = shard.index;
    lo.world = shard.count;
    lo.equal_shards = equal_shards;
    group->StartEvaluation();
  }
  std::vector<std::string> fetches = part.sends;
  const bool scores = !part.logits.empty();
  if (scores) {
    fetches.push_back(part.logits);
    fetches.push_back(part.loss);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader, data::BatchLoader::Create(test, lo));
  loader->StartEpoch(0);
  info.training = false;
  int64_t correct = 0, seen = 0;
  double loss_sum = 0;
  while (std::optional<data::Batch> batch = loader->Next()) {
    ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch, layout));
    info.step_in_epoch = batch->index_in_epoch;  // the key of its group collectives
    if (fetches.empty()) break;  // this rank's part takes no part in evaluation
    ASSIGN_OR_RETURN(std::vector<Tensor> out, executor.Evaluate(info, feeds, fetches));
    if (scores) {
      const Tensor& logits = out[part.sends.size()];
      int64_t k = logits.dim(1);
      for (int64_t i = 0; i < batch->size; ++i) {
        const float* row = logits.data<float>() + i * k;
        int64_t best = std::max_element(row, row + k) - row;
        correct += best == batch->labels[i];
      }
      loss_sum += out[part.sends.size() + 1].data<float>()[0] * batch->size;
      seen += batch->size;
    }
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

// Whether this rank's part sends to or receives from another rank.
bool HasPointToPoint(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (IsCutEnd(*n)) return true;
  }
  return false;
}

std::string RunSettings(const TrainOptions& options) {
  return absl::StrCat("batch=", options.batch, ";seed=", options.seed, ";epochs=", options.epochs,
                      ";dataset=", options.dataset,
                      ";normalize=", options.normalize, ";train_limit=", options.train_limit,
                      ";test_limit=", options.test_limit, ";max_steps=", options.max_steps,
                      ";eval_batch=", options.eval_batch, ";check_every=", options.check_every,
                      ";verify_messages=", options.verify_messages ? 1 : 0, ";transport=", options.transport,
                      ";gossip_eval=", options.gossip_eval);
}

// The first parameter (or optimizer state) holding a NaN or an infinity, if
// any: a diverged model must not be checkpointed or reported as trained.
std::optional<std::string> FirstNonFiniteState(const Executor& executor) {
  for (const auto& [name, value] : executor.State()) {
    if (value.dtype() != DT_FLOAT) continue;
    const float* v = value.data<float>();
    for (int64_t i = 0; i < value.num_elements(); ++i) {
      if (!std::isfinite(v[i])) return absl::StrCat(name, " (element ", i, " is ", v[i], ")");
    }
  }
  return std::nullopt;
}

// Where rank `rank` keeps its per-rank state: DIR/rank-<r>/epoch-<N>.ckpt.
std::string PerRankCheckpointDir(const std::string& dir, int rank) { return absl::StrCat(dir, "/rank-", rank); }

// Rank 0 writes the shared state; every rank writes its per-rank state (if
// any) beside it, so a resume restores each rank's own residuals.
absl::Status SaveCheckpoints(const TrainOptions& options, int64_t epochs_completed, int64_t step, bool within_epoch,
                             const Executor& executor, const absl::flat_hash_set<std::string>& per_rank) {
  Checkpoint shared{epochs_completed, step, {}}, mine{epochs_completed, step, {}};
  shared.within_epoch = mine.within_epoch = within_epoch;
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
  std::string path = absl::StrCat(PerRankCheckpointDir(options.checkpoint_dir, options.rank), "/",
                                  std::filesystem::path(at.path).filename().string());
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

absl::Status CheckOptions(const TrainOptions& options) {
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
  return absl::OkStatus();
}

// The dataset options for `graph`: synthetic data takes the shape the model's
// images input declares.
data::DatasetOptions DatasetOptionsFor(const Graph& graph, const std::string& dataset_name,
                                       const TrainOptions& options) {
  data::DatasetOptions dopts;
  dopts.dir = options.data_dir;
  if (dataset_name == "synthetic") {
    for (Node* n : graph.nodes()) {
      const auto& attr = n->def().attr();
      if (n->op() != "Input" || !attr.count("feed") || attr.at("feed").s() != "images") continue;
      const TensorShape& s = n->outputs()[0].shape;
      if (s.rank() == 4) {
        dopts.channels = s.dim(1);
        dopts.height = s.dim(2);
        dopts.width = s.dim(3);
      }
    }
    auto classes = graph.header().attr().find("num_classes");
    if (classes != graph.header().attr().end()) dopts.num_classes = static_cast<int>(classes->second.i());
  }
  dopts.seed = options.seed;
  return dopts;
}

// One rank's training run, as the steps it is: Plan, Connect, LoadData,
// CreateExecutor, Resume, CheckStateAcrossRanks, then per epoch TrainEpoch,
// EvaluateEpoch and SaveCheckpoint, and at the end Summarize.
class TrainingRun {
 public:
  TrainingRun(const TrainOptions& options, TraceRecorder* trace)
      : options_(options), trace_(trace), start_(absl::Now()) {}

  // This rank's part of the plan: the launcher's, or one built here from the
  // model and the passes (plan/build_plan.h); finds the nodes evaluation reads.
  absl::Status Plan() {
    if (trace_ != nullptr) trace_->NameThisThread("driver");
    if (options_.plan != nullptr) {
      plan_ = *options_.plan;
    } else {
      PlanTarget target{options_.workers, options_.servers};
      ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, PipelineFor(options_.passes, target));
      ASSIGN_OR_RETURN(BuiltPlan built, BuildPlan(PlanRequest{options_.model_path, std::move(pipeline), target,
                                                              options_.dataset}));
      plan_ = std::move(built.plan);
    }
    const int world = plan_.replicated() ? plan_.config().world_size() : plan_.worker_size();
    if (world != options_.workers) {
      return absl::FailedPreconditionError(
          absl::StrCat(options_.model_path, ": the plan is for ", world, " workers, not ", options_.workers));
    }
    ASSIGN_OR_RETURN(RankPlan mine, LoadRankPlan(plan_, options_.rank, options_.model_path));
    graph_ = std::move(mine.graph);
    progress_rank_ = mine.loss_rank;
    plan_fingerprint_ = plan_.fingerprint();
    result_.passes = plan_.config().passes();
    placed_ = HasPlacedNodes(*graph_);
    result_.model = GraphAttr(*graph_, "name").empty() ? options_.model_path : GraphAttr(*graph_, "name");
    logits_ = GraphAttr(*graph_, "logits");
    loss_ = GraphAttr(*graph_, "loss");
    if (logits_.empty() || loss_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          options_.model_path, ": the graph attributes 'logits' and 'loss' must name the nodes to evaluate"));
    }
    gossip_ = !GraphAttr(*graph_, "gossip").empty();
    gossip_overlap_ = GraphAttrInt(*graph_, kGossipOverlapAttr, 0);
    if (options_.gossip_eval != "ranks" && !gossip_) {
      return absl::InvalidArgumentError(absl::StrCat("--gossip-eval ", options_.gossip_eval,
                                                     " is for gossip plans (SGP); this plan has every rank's "
                                                     "model the same"));
    }
    coded_ = !GraphAttr(*graph_, "coded").empty();
    ASSIGN_OR_RETURN(shard_, DataShardOf(*graph_, options_.rank, options_.workers));
    if (coded_) shard_ = DataShard{};  // the master and the coded workers see the whole set, coded or not
    return absl::OkStatus();
  }

  // The nodes this rank fetches: the loss in training; in evaluation the
  // scores and the Sends that feed another rank's.
  bool HoldsLoss() const { return graph_->FindNode(loss_) != nullptr; }
  EvaluationPart EvaluationFetches() const {
    EvaluationPart part;
    if (graph_->FindNode(logits_) != nullptr && HoldsLoss()) {
      part.logits = logits_;
      part.loss = loss_;
    }
    for (const Node* n : graph_->nodes()) {
      if (n->op() == "Send" && IsCutEnd(*n) && NodeAttrBool(*n, "eval", false)) {
        part.sends.push_back(n->name());
      }
    }
    return part;
  }

  // With several workers: meets the other ranks (rendezvous, identity check).
  absl::Status Connect() {
    if (options_.workers <= 1) return absl::OkStatus();
    if (CollectivesByGroup(*graph_).empty() && !HasPointToPoint(*graph_)) {
      return absl::FailedPreconditionError(absl::StrCat(options_.model_path,
                                                        " has no gradient communication: plan it with data_parallel "
                                                        "to train on ",
                                                        options_.workers, " workers"));
    }
    GroupOptions g;
    g.rank = options_.rank;
    g.world = options_.workers;
    g.rendezvous = options_.rendezvous;
    g.run_id = options_.run_id;
    g.hostname = options_.bind_address;
    g.timeout = options_.comm_timeout;
    g.plan_fingerprint = plan_fingerprint_;
    g.settings = RunSettings(options_);
    g.verify_messages = options_.verify_messages;
    g.backend = options_.transport;
    if (options_.report) options_.report("phase=startup stage=rendezvous");
    ASSIGN_OR_RETURN(group_, DataParallelGroup::Join(*graph_, g));
    result_.strategy = "data_parallel";
    result_.transport = options_.transport;
    result_.model_parallel = GraphAttrInt(*graph_, "model_parallel", 1);
    if (result_.model_parallel > 1) result_.strategy = "hybrid";
    if (gossip_) result_.strategy = "gossip";
    if (placed_ && (GraphAttrInt(*graph_, "servers", 0) > 0 || !GraphAttr(*graph_, "parameter_server").empty())) {
      result_.strategy = "parameter_server";
    } else if (coded_) {
      result_.strategy = "coded";
    } else if (placed_) {
      result_.strategy = "model_parallel";
      result_.model_parallel = options_.workers / shard_.count;
    }
    if (trace_ != nullptr) {
      // One clock for every rank's trace: each counts from the earliest
      // rank's start (wall clock: exact on one machine, NTP-close across).
      std::vector<double> starts(static_cast<size_t>(options_.workers), 0.0);
      starts[static_cast<size_t>(options_.rank)] = absl::ToDoubleSeconds(trace_->start() - absl::UnixEpoch());
      RETURN_IF_ERROR(group_->SumAcrossRanks(starts));
      trace_->SetOrigin(absl::UnixEpoch() + absl::Seconds(*std::min_element(starts.begin(), starts.end())));
    }
    return absl::OkStatus();
  }

  absl::Status LoadData() {
    std::string dataset_name = options_.dataset.empty() ? GraphAttr(*graph_, "dataset") : options_.dataset;
    data::DatasetOptions dopts = DatasetOptionsFor(*graph_, dataset_name, options_);
    ASSIGN_OR_RETURN(dopts.normalize, data::ParseNormalization(options_.normalize));
    dopts.limit = options_.train_limit;
    ASSIGN_OR_RETURN(data::Dataset train_set, data::LoadNamedDataset(dataset_name, data::Split::kTrain, dopts));
    dopts.limit = options_.test_limit;
    ASSIGN_OR_RETURN(data::Dataset test_set, data::LoadNamedDataset(dataset_name, data::Split::kTest, dopts));
    result_.dataset = train_set.name;
    result_.normalization = train_set.normalization;
    train_ = std::make_shared<const data::Dataset>(std::move(train_set));
    test_ = std::make_shared<const data::Dataset>(std::move(test_set));
    if (coded_) RETURN_IF_ERROR(EncodeCodedData());
    return absl::OkStatus();
  }

  // Coded plans: every step is one full-batch gradient step, fed the same
  // tensors: the master the labels (in the data's order), each coded worker
  // its coded partition, built here (the encoding phase, its bytes counted).
  absl::Status EncodeCodedData() {
    if (group_ == nullptr) return absl::FailedPreconditionError("a coded plan runs on its master and coded workers");
    if (options_.rank == 0) {
      ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate(DT_INT32, {train_->num_examples}));
      std::memcpy(labels.raw(), train_->labels.data(), labels.num_bytes());
      coded_feeds_["labels"] = std::move(labels);
    }
    ASSIGN_OR_RETURN(CodeSpec spec, ParseCodedAttr(GraphAttr(*graph_, "coded")));
    ASSIGN_OR_RETURN(LinearCode code, LinearCode::Make(spec));
    ASSIGN_OR_RETURN(coded_departures_, DeparturePlan::Parse(GraphAttr(*graph_, "coded_departures"), spec.n, spec.seed));
    coded_code_ = code;
    const TrafficCounters before = group_->traffic();
    const absl::Time start = absl::Now();
    if (options_.rank > 0) {
      ASSIGN_OR_RETURN(CodedPartition partition, BuildCodedPartition(*train_, code, options_.rank - 1, /*first_rank=*/1,
                                                                     group_->communicator(), options_.comm_timeout));
      coded_feeds_["coded_rows"] = std::move(partition.rows);
      coded_feeds_["coded_columns"] = std::move(partition.columns);
    }
    std::vector<double> sent = {static_cast<double>(group_->traffic().bytes_sent - before.bytes_sent),
                                absl::ToDoubleSeconds(absl::Now() - start)};
    RETURN_IF_ERROR(group_->SumAcrossRanks(sent));
    result_.coded_encoding_bytes = static_cast<int64_t>(sent[0]);
    result_.coded_encoding_seconds = sent[1] / options_.workers;
    if (options_.progress != nullptr && options_.rank == 0) {
      std::fprintf(options_.progress, "coded: %s; encoding moved %.1f MiB\n", GraphAttr(*graph_, "coded").c_str(),
                   sent[0] / (1 << 20));
    }
    return absl::OkStatus();
  }

  // The executor and the training batch loader.
  absl::Status CreateExecutor() {
    ExecutorOptions eopts;
    eopts.threads = options_.threads;
    if (group_ != nullptr) {
      group_->ConfigureExecutor(eopts);
      eopts.compute_nice = kComputeNiceWithPeers;
    }
    eopts.trace = trace_;
    // A straggler, when NEREID_FAULTS asks for one (slow=DURATION).
    ASSIGN_OR_RETURN(FaultPlan faults, FaultPlanFromEnv(ProcessEnv()));
    eopts.slow_step = faults.SlowStepFor(group_ != nullptr ? group_->rank() : 0);
    ASSIGN_OR_RETURN(executor_, Executor::Create(graph_.get(), eopts));
    feed_layout_ = FeedLayoutOf(*graph_);
    // Error-feedback residuals: each rank checkpoints and keeps its own.
    per_rank_ = DataParallelGroup::PerRankState(*graph_);
    for (std::string& name : DataParallelGroup::RunningStatistics(*graph_)) running_statistics_.insert(std::move(name));

    data::LoaderOptions lo;
    lo.batch_size = options_.batch;
    lo.seed = options_.seed;
    lo.rank = shard_.index;
    lo.world = shard_.count;
    // Group collectives exchange batches: every rank's must be the same size.
    lo.equal_shards = group_ != nullptr && EqualShards(*graph_);
    ASSIGN_OR_RETURN(loader_, data::BatchLoader::Create(train_, lo));
    // Ranks step in lock-step: all take as many steps as the smallest shard
    // (N / world examples) gives, so an odd example out is skipped.
    int64_t smallest_shard = train_->num_examples / shard_.count;
    steps_per_epoch_ = (smallest_shard + options_.batch - 1) / options_.batch;
    if (coded_) steps_per_epoch_ = 1;  // a full-batch step per epoch
    return absl::OkStatus();
  }

  // --resume: the last complete checkpoint's state, epoch and step (none
  // yet: from the start).
  absl::Status Resume() {
    // Temporary files of writers killed mid-write, in the directories this
    // rank writes (rank 0 the shared one, each rank its own).
    if (!options_.checkpoint_dir.empty()) {
      if (options_.rank == 0) RemoveStaleTemporaryFiles(options_.checkpoint_dir);
      RemoveStaleTemporaryFiles(PerRankCheckpointDir(options_.checkpoint_dir, options_.rank));
    }
    if (!options_.resume) return absl::OkStatus();
    if (options_.checkpoint_dir.empty()) return absl::InvalidArgumentError("--resume needs --checkpoint DIR");
    absl::StatusOr<Checkpoint> ckpt = LoadLatestCheckpoint(options_.checkpoint_dir);
    if (absl::IsNotFound(ckpt.status())) {
      return absl::NotFoundError(absl::StrCat("--resume: ", ckpt.status().message(),
                                              " to resume from (run without --resume to start from scratch)"));
    }
    if (!ckpt.ok()) return ckpt.status();
    if (!ckpt->fallback_reason.empty() && options_.progress != nullptr) {
      std::fprintf(options_.progress, "warning: %s; resuming from %s instead\n", ckpt->fallback_reason.c_str(),
                   ckpt->path.c_str());
    }
    for (const auto& [name, value] : ckpt->tensors) RETURN_IF_ERROR(executor_->SetState(name, value));
    if (!per_rank_.empty()) RETURN_IF_ERROR(RestorePerRankState(options_, *ckpt, *executor_));
    first_epoch_ = ckpt->epochs_completed;
    step_ = ckpt->step;
    // A checkpoint from within an epoch: that epoch goes on from its next batch.
    resume_index_ = std::clamp<int64_t>(step_ - first_epoch_ * steps_per_epoch_, 0, steps_per_epoch_);
    if (options_.progress != nullptr) {
      std::fprintf(options_.progress, "resuming after epoch %lld (step %lld) from %s\n",
                   static_cast<long long>(first_epoch_), static_cast<long long>(step_), ckpt->path.c_str());
    }
    return absl::OkStatus();
  }

  // Every rank starts from rank 0's parameters; the collective engine starts
  // at this step. Then the training loop's bookkeeping starts.
  absl::Status CheckStateAcrossRanks() {
    if (group_ != nullptr) {
      RETURN_IF_ERROR(group_->CheckIdenticalState(*executor_, per_rank_));
      group_->StartAt(step_);
      group_->SetTrace(trace_);
    }
    // While this rank waits in a collective for its peers it is not hung: say
    // so every second, so the launcher blames the rank that stopped instead.
    if (group_ != nullptr && options_.report) {
      DataParallelGroup* group = group_.get();
      const TrainOptions* options = &options_;
      waiting_reporter_ = std::make_unique<PeriodicReporter>(absl::Seconds(1), [group, options] {
        if (std::optional<std::string> what = group->WaitingFor()) {
          options->report(absl::StrCat("phase=", *what, " waiting_for_peers"));
        }
      });
    }
    BufferPool::Global().ResetPeak();
    progress_ = std::make_unique<Progress>(options_.rank == progress_rank_ ? options_.progress : nullptr, options_.epochs,
                                           steps_per_epoch_, options_.max_steps);
    if (!options_.log_jsonl.empty() && options_.rank == progress_rank_) {
      ASSIGN_OR_RETURN(step_log_, StepLog::Open(options_.log_jsonl));
      Json start;
      start["version"] = kNereidVersion;
      if (!options_.revision.empty()) start["revision"] = options_.revision;
      start["model"] = result_.model;
      start["workers"] = options_.workers;
      start["rank"] = options_.rank;
      start["epochs"] = options_.epochs;
      start["steps"] = progress_->total();
      step_log_->Write("start", start);
      if (group_ != nullptr) traffic_logged_ = group_->traffic().bytes_sent;
    }
    // Pipelined plans (pipeline(width=K)) keep up to K steps in flight.
    in_flight_ = executor_->tracker().max_steps_in_flight();
    result_.pipeline_width = in_flight_;
    if (!GraphAttr(*graph_, "compression").empty()) result_.compression = GraphAttr(*graph_, "compression");
    return absl::OkStatus();
  }

  int64_t first_epoch() const { return first_epoch_; }
  bool ReachedMaxSteps() const { return options_.max_steps > 0 && result_.steps >= options_.max_steps; }

  // The epoch's steps, up to K in flight: step s starts once step s-K is
  // finished (the tracker's bound; StartStep waits for it), and each step's
  // loss is read when it finishes. Returns the epoch's loss and time, summed
  // over the ranks.
  absl::StatusOr<EpochMetrics> TrainEpoch(int64_t epoch) {
    absl::Time epoch_start = absl::Now();
    loader_->StartEpoch(epoch);
    EpochLoss sums;
    int64_t index = 0;
    if (epoch == first_epoch_ && resume_index_ > 0) {
      loader_->SkipTo(resume_index_);
      index = resume_index_;
      resume_index_ = 0;
    }
    std::deque<StepInFlight> flight;
    // On an error (a failed step, a NaN loss), steps still in flight are
    // aborted and waited for, so none outlives the executor.
    absl::Cleanup drain = [&] {
      if (flight.empty()) return;
      executor_->Abort(absl::CancelledError("training stopped on an earlier error"));
      for (const StepInFlight& f : flight) executor_->FinishStep(f.step).IgnoreError();
    };
    TrafficCounters traffic_at_start;
    if (group_ != nullptr) traffic_at_start = group_->traffic();
    while (index < steps_per_epoch_) {
      if (options_.max_steps > 0 && result_.steps + static_cast<int64_t>(flight.size()) >= options_.max_steps) break;
      std::optional<data::Batch> batch;
      if (!coded_) {
        batch = loader_->Next();
        if (!batch) break;
      } else {
        RETURN_IF_ERROR(ResendToReturningWorkers());
      }
      ASSIGN_OR_RETURN(FeedMap feeds, coded_ ? absl::StatusOr<FeedMap>(coded_feeds_) : FeedsOf(*batch, feed_layout_));
      const int64_t examples = coded_ ? train_->num_examples : batch->size;
      while (static_cast<int>(flight.size()) >= in_flight_) RETURN_IF_ERROR(FinishOldest(flight, epoch_start, sums));
      StepInfo info{epoch, step_, index, steps_per_epoch_, options_.epochs, true};
      if (first_step_started_ == absl::InfinitePast()) first_step_started_ = absl::Now();
      flight.push_back({step_, epoch, index, examples, absl::Now()});
      RETURN_IF_ERROR(executor_->StartStep(info, std::move(feeds), HoldsLoss() ? std::vector<std::string>{loss_}
                                                                                : std::vector<std::string>{}));
      ++step_;
      ++index;
      // Every check_every steps the ranks compare their parameters (with
      // nothing in flight, so every rank has applied the same steps).
      if (group_ != nullptr && options_.check_every > 0 && step_ % options_.check_every == 0) {
        while (!flight.empty()) RETURN_IF_ERROR(FinishOldest(flight, epoch_start, sums));
        RETURN_IF_ERROR(group_->CheckSameState(*executor_, per_rank_, step_));
      }
      // --checkpoint-every: a checkpoint within the epoch (its end writes one anyway).
      if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0 && index < steps_per_epoch_ &&
          !options_.checkpoint_dir.empty()) {
        while (!flight.empty()) RETURN_IF_ERROR(FinishOldest(flight, epoch_start, sums));
        RETURN_IF_ERROR(SaveCheckpointAt(epoch, /*within_epoch=*/true));
      }
    }
    // Evaluation and checkpoints see every step of the epoch applied.
    while (!flight.empty()) RETURN_IF_ERROR(FinishOldest(flight, epoch_start, sums));
    if (group_ != nullptr) {
      TrafficCounters now = group_->traffic();
      traffic_in_steps_.bytes_sent += now.bytes_sent - traffic_at_start.bytes_sent;
      traffic_in_steps_.bytes_received += now.bytes_received - traffic_at_start.bytes_received;
      std::vector<double> totals = {sums.loss, static_cast<double>(sums.samples)};
      RETURN_IF_ERROR(group_->SumAcrossRanks(totals));
      sums.loss = totals[0];
      sums.samples = static_cast<int64_t>(std::llround(totals[1]));
    }
    EpochMetrics m;
    m.epoch = epoch;
    if (coded_ && options_.rank == 0) {
      const CodedRoundTotals now = CodedRoundStats::Global().totals();
      const double gathers = static_cast<double>(now.gathers - coded_seen_.gathers);
      if (gathers > 0) {
        m.coded_present = static_cast<double>(now.present - coded_seen_.present) / gathers;
        m.coded_used = static_cast<double>(now.answers_used - coded_seen_.answers_used) / gathers;
      }
      coded_seen_ = now;
    }
    m.seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start);
    m.train_loss = sums.samples > 0 ? sums.loss / sums.samples : 0;
    m.samples_per_second = m.seconds > 0 ? sums.samples / m.seconds : 0;
    train_seconds_ += m.seconds;
    train_samples_ += sums.samples;
    return m;
  }

  // Gossip plans: each rank's trained parameters (its own; optimizer state
  // and the push-sum weight aside), by name.
  // With overlap the model is the de-biased x / w (what the forward pass
  // reads), under the parameters' names.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> GossipedModel() const {
    std::vector<std::pair<std::string, Tensor>> model;
    float weight = 1;
    for (auto& [name, value] : executor_->State()) {
      if (name == kPushSumWeight) weight = value.data<float>()[0];
    }
    for (auto& [name, value] : executor_->State()) {
      const Node* n = graph_->FindNode(name);
      if (!per_rank_.contains(name) || n == nullptr || !NodeAttrBool(*n, "trainable", true)) continue;
      if (gossip_overlap_ == 0) {
        model.emplace_back(name, value);
        continue;
      }
      ASSIGN_OR_RETURN(Tensor debiased, value.Clone());
      float* v = debiased.data<float>();
      for (int64_t i = 0; i < debiased.num_elements(); ++i) v[i] /= weight;
      model.emplace_back(name, std::move(debiased));
    }
    return model;
  }

  // A copy of this rank's own state (parameters, push-sum weight, pushes in
  // flight, optimizer state), to go back to after scoring the average.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> OwnState() const {
    std::vector<std::pair<std::string, Tensor>> own;
    for (const auto& [name, value] : executor_->State()) {
      if (!per_rank_.contains(name)) continue;
      ASSIGN_OR_RETURN(Tensor copy, value.Clone());
      own.emplace_back(name, std::move(copy));
    }
    return own;
  }

  // Push-sum's mass over the ranks: every weight plus the weight in flight
  // (overlap's delayed pushes); the world size when nothing is lost.
  absl::StatusOr<double> PushSumMass() {
    std::vector<double> mass = {0};
    for (const auto& [name, value] : executor_->State()) {
      if (name == kPushSumWeight || absl::StartsWith(name, absl::StrCat(kPushSumWeight, "/gossip/in_flight_"))) {
        mass[0] += value.data<float>()[0];
      }
    }
    RETURN_IF_ERROR(group_->SumAcrossRanks(mass));
    return mass[0];
  }

  // The average of the ranks' models (one allreduce); with `adopt`, every
  // rank takes it. Returns the mean distance of the ranks' models from it,
  // relative to its norm.
  absl::StatusOr<double> AverageGossipedModels(bool adopt) {
    ASSIGN_OR_RETURN(result_.push_sum_weight_total, PushSumMass());
    using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
    ASSIGN_OR_RETURN(NamedTensors model, GossipedModel());
    std::vector<double> mine;
    for (const auto& [name, t] : model) mine.insert(mine.end(), t.data<float>(), t.data<float>() + t.num_elements());
    ASSIGN_OR_RETURN(std::vector<double> mean, group_->AverageAcrossRanks(*executor_, model, adopt));
    if (adopt && gossip_overlap_ > 0) {
      // x is now the average of the de-biased models: its weight is 1, and
      // the pushes still in flight (mixed into the average) are dropped.
      for (const auto& [name, value] : executor_->State()) {
        const bool weight = name == kPushSumWeight;
        if (!weight && !absl::StrContains(name, "/gossip/in_flight_")) continue;
        ASSIGN_OR_RETURN(Tensor reset, Tensor::Zeros(DT_FLOAT, value.dims()));
        if (weight) reset.data<float>()[0] = 1;
        RETURN_IF_ERROR(executor_->SetState(name, reset));
      }
    }
    double distance2 = 0, norm2 = 0;
    for (size_t i = 0; i < mean.size(); ++i) {
      distance2 += (mine[i] - mean[i]) * (mine[i] - mean[i]);
      norm2 += mean[i] * mean[i];
    }
    std::vector<double> distance = {std::sqrt(distance2)};
    RETURN_IF_ERROR(group_->SumAcrossRanks(distance));
    return norm2 > 0 ? distance[0] / options_.workers / std::sqrt(norm2) : 0.0;
  }

  // The test set, sharded over the ranks, after every step of the epoch.
  absl::Status EvaluateEpoch(EpochMetrics& m) {
    RETURN_IF_ERROR(CheckFinite(m.epoch));
    // Gossip: how far apart the ranks' models are; after the last epoch
    // every rank takes their average, the run's final model.
    // With --gossip-eval average every epoch scores the average, and each
    // rank's own state comes back after it.
    std::vector<std::pair<std::string, Tensor>> own;
    if (group_ != nullptr && gossip_) {
      const bool last = m.epoch + 1 == options_.epochs || ReachedMaxSteps();
      const bool average_for_now = !last && options_.gossip_eval == "average";
      if (average_for_now) {
        ASSIGN_OR_RETURN(own, OwnState());
      }
      ASSIGN_OR_RETURN(m.consensus_distance, AverageGossipedModels(/*adopt=*/last || average_for_now));
    }
    // Each rank's batch-norm statistics come from its own batches; the ranks
    // evaluate shards of one test set and save one checkpoint, so they first
    // take the average (a population estimate over every rank's batches).
    if (group_ != nullptr && !running_statistics_.empty()) {
      std::vector<std::pair<std::string, Tensor>> statistics;
      for (auto& [name, value] : executor_->State()) {
        if (running_statistics_.contains(name)) statistics.emplace_back(name, value);
      }
      RETURN_IF_ERROR(group_->AverageAcrossRanks(*executor_, statistics, /*adopt=*/true).status());
    }
    StepInfo eval_info{m.epoch, step_, 0, steps_per_epoch_, options_.epochs, false};
    TraceSpan eval_span(trace_, "evaluate", "eval", {{"epoch", m.epoch}, {"step", step_}});
    Executor* evaluator = executor_.get();
    EvaluationPart part = EvaluationFetches();
    if (coded_ && options_.rank == 0) {
      ASSIGN_OR_RETURN(evaluator, CodedEvaluator(part));
    }
    ASSIGN_OR_RETURN(Evaluation eval, EvaluateTestSet(*evaluator, test_, options_, part, shard_, EqualShards(*graph_),
                                                      eval_info, group_.get(), feed_layout_));
    eval_span.End();
    for (auto& [name, value] : own) RETURN_IF_ERROR(executor_->SetState(name, value));
    m.test_accuracy = eval.accuracy;
    m.test_loss = eval.loss;
    if (!std::isfinite(eval.loss)) {
      return absl::InvalidArgumentError(absl::StrCat("the test loss became ", eval.loss, " after epoch ", m.epoch + 1,
                                                     ": training diverged (try a smaller learning rate); nothing was "
                                                     "checkpointed"));
    }
    progress_->EpochDone(m);
    if (step_log_ != nullptr) step_log_->Write("epoch", EpochJson(m));
    result_.per_epoch.push_back(m);
    return absl::OkStatus();
  }

  // Coded plans: a worker that left lost its coded partition; in the round it
  // returns, the holders send it the partitions again (counted in
  // coded.resent_bytes). The master takes no part.
  absl::Status ResendToReturningWorkers() {
    if (step_ == 0 || coded_departures_.empty() || options_.rank == 0) return absl::OkStatus();
    std::vector<int> returning;
    for (int w = 0; w < coded_code_->spec().n; ++w) {
      if (coded_departures_.Gone(step_ - 1, w) && !coded_departures_.Gone(step_, w)) returning.push_back(w);
    }
    if (returning.empty()) return absl::OkStatus();
    const int64_t before = group_->traffic().bytes_sent;
    ASSIGN_OR_RETURN(std::optional<CodedPartition> mine,
                     ResendCodedPartitions(*train_, *coded_code_, options_.rank - 1, returning, /*first_rank=*/1,
                                           group_->communicator(), options_.comm_timeout));
    coded_resent_bytes_ += group_->traffic().bytes_sent - before;
    if (mine.has_value()) {
      coded_feeds_["coded_rows"] = std::move(mine->rows);
      coded_feeds_["coded_columns"] = std::move(mine->columns);
    }
    return absl::OkStatus();
  }

  // Coded plans: the master's decodes need the workers' coded training data,
  // so it evaluates with the model's own forward graph (the test set is not
  // coded) and its current parameters.
  absl::StatusOr<Executor*> CodedEvaluator(EvaluationPart& part) {
    if (coded_evaluator_ == nullptr) {
      GraphFile source;
      source.path = absl::StrCat(options_.model_path, " (the model the plan came from)");
      source.def = plan_.source();
      ASSIGN_OR_RETURN(coded_model_, LoadModel(source));
      ExecutorOptions eopts;
      eopts.threads = options_.threads;
      ASSIGN_OR_RETURN(coded_evaluator_, Executor::Create(coded_model_.get(), eopts));
    }
    for (const auto& [name, value] : executor_->State()) {
      if (coded_model_->FindNode(name) != nullptr) RETURN_IF_ERROR(coded_evaluator_->SetState(name, value));
    }
    part.logits = GraphAttr(*coded_model_, "logits");
    part.loss = GraphAttr(*coded_model_, "loss");
    return coded_evaluator_.get();
  }

  // After `epoch`: a checkpoint of the whole epoch, or one within it when
  // --max-steps ended the run before the epoch's end (a resume goes on there).
  absl::Status SaveCheckpoint(int64_t epoch) {
    if (options_.checkpoint_dir.empty()) return absl::OkStatus();
    return SaveCheckpointAt(epoch, /*within_epoch=*/step_ < (epoch + 1) * steps_per_epoch_);
  }

  // The run's figures (communication summed over the ranks, then per rank
  // and step), written as --metrics-json asks.
  absl::StatusOr<TrainResult> Summarize() {
    result_.epochs = static_cast<int64_t>(result_.per_epoch.size());
    if (!result_.per_epoch.empty()) {
      result_.final_train_loss = result_.per_epoch.back().train_loss;
      result_.final_test_accuracy = result_.per_epoch.back().test_accuracy;
    }
    result_.samples_per_second = train_seconds_ > 0 ? train_samples_ / train_seconds_ : 0;
    result_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    result_.peak_rss_bytes = PeakRssBytes();
    result_.peak_tensor_bytes = BufferPool::Global().stats().peak_bytes_in_use;
    if (group_ != nullptr) RETURN_IF_ERROR(group_->CheckSameState(*executor_, per_rank_, step_));
    result_.parameter_fingerprint = DataParallelGroup::StateFingerprint(*executor_, per_rank_);
    if (coded_) {
      // The master's decode figures (zero elsewhere), so every rank reports them.
      const CodedRoundTotals t = CodedRoundStats::Global().totals();
      const double g = std::max<double>(1, static_cast<double>(t.gathers));
      std::vector<double> coded = {static_cast<double>(coded_resent_bytes_), t.present / g, t.gone / g,
                                   t.answers_used / g, absl::ToDoubleSeconds(t.wait) / g,
                                   absl::ToDoubleSeconds(t.decode) / g};
      RETURN_IF_ERROR(group_->SumAcrossRanks(coded));
      result_.coded_resent_bytes = static_cast<int64_t>(coded[0]);
      result_.coded_present_per_gather = coded[1];
      result_.coded_gone_per_gather = coded[2];
      result_.coded_answers_per_decode = coded[3];
      result_.coded_wait_seconds_per_gather = coded[4];
      result_.coded_decode_seconds_per_gather = coded[5];
    }
    for (const auto& [name, value] : executor_->State()) {
      result_.state_bytes += value.num_bytes();
      if (per_rank_.contains(name)) result_.per_rank_state_bytes += value.num_bytes();
    }
    // Each rank's measured peak and state, for plans whose ranks differ.
    result_.rank_peak_tensor_bytes = {result_.peak_tensor_bytes};
    result_.rank_state_bytes = {result_.state_bytes};
    if (group_ != nullptr) {
      std::vector<double> peaks(2 * static_cast<size_t>(options_.workers), 0.0);
      peaks[static_cast<size_t>(options_.rank)] = static_cast<double>(result_.peak_tensor_bytes);
      peaks[static_cast<size_t>(options_.workers + options_.rank)] = static_cast<double>(result_.state_bytes);
      RETURN_IF_ERROR(group_->SumAcrossRanks(peaks));
      result_.rank_peak_tensor_bytes.assign(peaks.begin(), peaks.begin() + options_.workers);
      result_.rank_state_bytes.assign(peaks.begin() + options_.workers, peaks.end());
    }
    if (group_ != nullptr) {
      std::vector<double> sums = {static_cast<double>(traffic_in_steps_.bytes_sent),
                                  static_cast<double>(traffic_in_steps_.bytes_received),
                                  absl::ToDoubleSeconds(group_->engine()->busy_time()),
                                  absl::ToDoubleSeconds(group_->engine()->codec_time())};
      RETURN_IF_ERROR(group_->SumAcrossRanks(sums));
      if (result_.steps > 0) {
        const double per_step = 1.0 / options_.workers / result_.steps;
        result_.bytes_sent_per_step = sums[0] * per_step;
        result_.bytes_received_per_step = sums[1] * per_step;
        result_.comm_seconds_per_step = sums[2] * per_step;
        result_.codec_seconds_per_step = sums[3] * per_step;
      }
      ASSIGN_OR_RETURN(result_.layer_bytes, PlanLayerBytes(*graph_, options_.workers));
    }
    // A placed plan holds the loss on some ranks only: every rank reports the
    // first holder's step losses.
    if (group_ != nullptr && placed_) {
      std::vector<double> losses(static_cast<size_t>(result_.steps), 0.0);
      if (options_.rank == progress_rank_) {
        for (size_t i = 0; i < losses.size() && i < result_.step_losses.size(); ++i) losses[i] = result_.step_losses[i];
      }
      RETURN_IF_ERROR(group_->SumAcrossRanks(losses));
      result_.step_losses.assign(losses.begin(), losses.end());
    }
    if (!options_.metrics_json.empty()) {
      RETURN_IF_ERROR(WriteFileAtomically(options_.metrics_json, MetricsJson(options_, result_)));
    }
    if (step_log_ != nullptr) {
      Json end;
      end["steps"] = result_.steps;
      end["seconds"] = absl::ToDoubleSeconds(absl::Now() - start_);
      step_log_->Write("end", end);
      RETURN_IF_ERROR(step_log_->Close());
    }
    return result_;
  }

 private:
  struct StepInFlight {
    int64_t step, epoch, index, examples;
    absl::Time started;
  };
  struct EpochLoss {
    double loss = 0;  // summed over examples
    int64_t samples = 0;
  };

  // Flags, once, a run whose loss has not gone below its start by
  // stall_check_percent of its steps: a run training to chance looks like
  // this, and would otherwise end with exit 0 and nothing said.
  void CheckLossImproving() {
    if (options_.stall_check_percent <= 0 || stall_checked_) return;
    const std::vector<float>& losses = result_.step_losses;
    const int64_t n = static_cast<int64_t>(losses.size());
    if (n < std::max<int64_t>(2, progress_->total() * options_.stall_check_percent / 100)) return;
    stall_checked_ = true;
    const int64_t w = std::clamp<int64_t>(n / 10, 1, 20);  // steps averaged at each end
    double first = 0, recent = 0;
    for (int64_t i = 0; i < w; ++i) {
      first += losses[static_cast<size_t>(i)];
      recent += losses[static_cast<size_t>(n - w + i)];
    }
    first /= static_cast<double>(w);
    recent /= static_cast<double>(w);
    if (recent < 0.99 * first) return;
    result_.loss_not_improving = true;
    progress_->Warn(absl::StrFormat("the loss has not improved on its start after %lld of %lld steps (%.4f over the "
                                    "first %lld, %.4f over the last): check the learning rate, the codec and the data",
                                    static_cast<long long>(n), static_cast<long long>(progress_->total()), first,
                                    static_cast<long long>(w), recent));
  }

  // A checkpoint at the end of `epoch`, or within it at step_; the ranks
  // compare their parameters first, and nothing non-finite is written.
  absl::Status SaveCheckpointAt(int64_t epoch, bool within_epoch) {
    RETURN_IF_ERROR(CheckFinite(epoch));
    if (group_ != nullptr) RETURN_IF_ERROR(group_->CheckSameState(*executor_, per_rank_, step_));
    return SaveCheckpoints(options_, within_epoch ? epoch : epoch + 1, step_, within_epoch, *executor_, per_rank_);
  }

  // An error naming the first non-finite parameter, so nothing diverged is
  // evaluated, checkpointed or reported.
  absl::Status CheckFinite(int64_t epoch) const {
    if (std::optional<std::string> bad = FirstNonFiniteState(*executor_)) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", *bad, " is not finite after epoch ", epoch + 1,
                                                     " (step ", step_, "): training diverged (try a smaller learning "
                                                     "rate); nothing was checkpointed"));
    }
    return absl::OkStatus();
  }

  // Finishes the oldest step in flight: its trace span, its loss (a NaN ends
  // the run), the progress line.
  absl::Status FinishOldest(std::deque<StepInFlight>& flight, absl::Time epoch_start, EpochLoss& sums) {
    StepInFlight f = flight.front();
    flight.pop_front();
    absl::StatusOr<std::vector<Tensor>> out = executor_->FinishStep(f.step);
    if (trace_ != nullptr) {
      // Overlapping steps cannot share the driver's track.
      std::string name = absl::StrCat("step ", f.step);
      TraceArg args[] = {{"step", f.step}, {"epoch", f.epoch}};
      if (in_flight_ == 1) {
        trace_->Complete(name, "step", f.started, absl::Now(), args);
      } else {
        trace_->Async(name, "step", f.started, absl::Now(), args);
      }
    }
    if (!out.ok()) return out.status();
    if (options_.report) options_.report(absl::StrCat("phase=train epoch=", f.epoch, " step=", f.step));
    ++result_.steps;
    result_.step_finished_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - first_step_started_));
    if (out->empty()) return absl::OkStatus();  // another rank holds the loss
    float value = (*out)[0].data<float>()[0];
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat("the loss became ", value, " at epoch ", f.epoch + 1, ", step ",
                                                     f.step, ": training diverged (try a smaller learning rate)"));
    }
    result_.step_losses.push_back(value);
    CheckLossImproving();
    sums.loss += static_cast<double>(value) * f.examples;
    sums.samples += f.examples;
    double elapsed = absl::ToDoubleSeconds(absl::Now() - epoch_start);
    progress_->Step(f.epoch, f.index, sums.loss / sums.samples,
                    elapsed > 0 ? sums.samples * shard_.count / elapsed : 0);
    if (step_log_ != nullptr) {
      Json line;
      line["epoch"] = f.epoch + 1;
      line["step"] = f.step + 1;
      line["loss"] = value;
      line["step_seconds"] = absl::ToDoubleSeconds(absl::Now() - f.started);
      line["samples"] = f.examples;
      if (group_ != nullptr) {
        const int64_t sent = group_->traffic().bytes_sent;
        line["bytes_sent"] = sent - traffic_logged_;
        traffic_logged_ = sent;
      }
      step_log_->Write("step", line);
    }
    return absl::OkStatus();
  }

  const TrainOptions& options_;
  TraceRecorder* trace_;
  const absl::Time start_;
  TrainResult result_;
  std::unique_ptr<Graph> graph_;
  std::string logits_, loss_;
  PlanDef plan_;                  // every rank's, the same on every rank
  std::string plan_fingerprint_;  // of the whole plan
  DataShard shard_;
  int progress_rank_ = 0;  // the rank that prints progress (the first holding the loss)
  bool placed_ = false;    // the plan runs different nodes on different ranks
  bool gossip_ = false;    // ranks keep their own models (the gossip pass)
  int64_t gossip_overlap_ = 0;  // > 0: pushes mixed in later; the model is x / gossip/weight
  bool coded_ = false;     // rank 0 decodes coded workers' results (the coded pass)
  FeedMap coded_feeds_;    // coded plans: what every step feeds this rank
  std::optional<LinearCode> coded_code_;
  DeparturePlan coded_departures_;
  int64_t coded_resent_bytes_ = 0;  // this rank's sends to returning workers
  CodedRoundTotals coded_seen_;     // the master's figures at the last epoch's end
  std::unique_ptr<Graph> coded_model_;          // coded plans: the model, for the master's evaluation
  std::unique_ptr<Executor> coded_evaluator_;
  std::unique_ptr<DataParallelGroup> group_;
  std::shared_ptr<const data::Dataset> train_, test_;
  std::unique_ptr<Executor> executor_;
  FeedLayout feed_layout_;  // how batches feed this rank's images Input
  absl::flat_hash_set<std::string> per_rank_;
  absl::flat_hash_set<std::string> running_statistics_;  // per-rank, averaged before each evaluation
  std::unique_ptr<data::BatchLoader> loader_;
  int64_t steps_per_epoch_ = 0;
  absl::Time first_step_started_ = absl::InfinitePast();
  int64_t resume_index_ = 0;  // the first epoch's first batch after a resume within it
  bool stall_checked_ = false;
  int64_t first_epoch_ = 0, step_ = 0;
  int in_flight_ = 1;
  std::unique_ptr<PeriodicReporter> waiting_reporter_;
  std::unique_ptr<Progress> progress_;
  TrafficCounters traffic_in_steps_;
  std::unique_ptr<StepLog> step_log_;  // --log-jsonl, on the rank printing progress
  int64_t traffic_logged_ = 0;         // this rank's bytes sent when the last step was logged
  double train_seconds_ = 0;
  int64_t train_samples_ = 0;
};

// Train, recording into `trace` (null: no trace).
absl::StatusOr<TrainResult> TrainAll(const TrainOptions& options, TrainingRun& run) {
  RETURN_IF_ERROR(run.Plan());
  RETURN_IF_ERROR(run.Connect());
  // Start-up stages: the launcher's start-up window covers them, however
  // short its progress timeout.
  auto stage = [&](const char* name) {
    if (options.report) options.report(absl::StrCat("phase=startup stage=", name));
  };
  stage("load_data");
  RETURN_IF_ERROR(run.LoadData());
  stage("create_executor");
  RETURN_IF_ERROR(run.CreateExecutor());
  stage("resume");
  RETURN_IF_ERROR(run.Resume());
  stage("check_state");
  RETURN_IF_ERROR(run.CheckStateAcrossRanks());
  // Start-up is over: from here the progress timeout applies, also to a rank
  // that stops inside its first step (a server, say, that never finishes one).
  if (options.report) options.report("phase=train starting");
  for (int64_t epoch = run.first_epoch(); epoch < options.epochs; ++epoch) {
    ASSIGN_OR_RETURN(EpochMetrics metrics, run.TrainEpoch(epoch));
    RETURN_IF_ERROR(run.EvaluateEpoch(metrics));
    RETURN_IF_ERROR(run.SaveCheckpoint(epoch));
    if (run.ReachedMaxSteps()) break;
  }
  return run.Summarize();
}

absl::StatusOr<TrainResult> TrainWith(const TrainOptions& options, TraceRecorder* trace) {
  RETURN_IF_ERROR(CheckOptions(options));
  TrainingRun run(options, trace);
  absl::StatusOr<TrainResult> result = TrainAll(options, run);
  if (!result.ok() && options.report_error) options.report_error(result.status());
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
  Json j;
  j["model"] = r.model;
  j["version"] = kNereidVersion;
  if (!options.revision.empty()) j["revision"] = options.revision;
  j["finished_unix_seconds"] = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  j["workers"] = int64_t{options.workers};
  j["rank"] = int64_t{options.rank};
  j["threads"] = int64_t{options.threads};
  j["strategy"] = r.strategy;
  if (!r.transport.empty()) j["transport"] = r.transport;
  if (r.strategy == "coded") {
    Json coded;
    coded["encoding_bytes"] = r.coded_encoding_bytes;
    coded["encoding_seconds"] = r.coded_encoding_seconds;
    coded["resent_bytes"] = r.coded_resent_bytes;
    coded["present_per_gather"] = r.coded_present_per_gather;
    coded["gone_per_gather"] = r.coded_gone_per_gather;
    coded["answers_per_decode"] = r.coded_answers_per_decode;
    coded["wait_seconds_per_gather"] = r.coded_wait_seconds_per_gather;
    coded["decode_seconds_per_gather"] = r.coded_decode_seconds_per_gather;
    j["coded"] = std::move(coded);
  }
  j["dataset"] = r.dataset;
  j["normalization"] = r.normalization;
  j["passes"] = r.passes;
  j["pipeline_width"] = r.pipeline_width;
  j["compression"] = r.compression;
  j["epochs"] = r.epochs;
  j["steps"] = r.steps;
  j["batch_per_worker"] = options.batch;
  j["seed"] = static_cast<int64_t>(options.seed);
  j["final_train_loss"] = r.final_train_loss;
  j["final_test_accuracy"] = r.final_test_accuracy;
  j["samples_per_second"] = r.samples_per_second;
  j["wall_seconds"] = r.wall_seconds;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["peak_tensor_bytes"] = r.peak_tensor_bytes;
  j["rank_peak_tensor_bytes"] = r.rank_peak_tensor_bytes;
  j["rank_state_bytes"] = r.rank_state_bytes;
  j["bytes_sent_per_step"] = r.bytes_sent_per_step;
  j["bytes_received_per_step"] = r.bytes_received_per_step;
  j["comm_seconds_per_step"] = r.comm_seconds_per_step;
  j["codec_seconds_per_step"] = r.codec_seconds_per_step;
  j["parameter_fingerprint"] = absl::StrCat(absl::Hex(r.parameter_fingerprint, absl::kZeroPad16));
  j["model_parallel"] = r.model_parallel;
  j["state_bytes"] = r.state_bytes;
  j["per_rank_state_bytes"] = r.per_rank_state_bytes;
  if (r.push_sum_weight_total >= 0) j["push_sum_weight_total"] = r.push_sum_weight_total;
  Json losses = Json::array();
  for (float l : r.step_losses) losses.push_back(l);
  j["step_losses"] = std::move(losses);
  j["step_finished_seconds"] = r.step_finished_seconds;
  j["loss_not_improving"] = r.loss_not_improving;
  Json layers = Json::array();
  for (const LayerBytes& l : r.layer_bytes) {
    Json layer;
    layer["name"] = l.name;
    layer["method"] = l.method;
    layer["collective"] = l.collective;
    layer["elements"] = l.elements;
    layer["payload_bytes"] = l.payload_bytes;
    layer["payload_is_bound"] = l.payload_is_bound;
    layer["sent_bytes"] = l.sent_bytes;
    layer["uncompressed_sent_bytes"] = l.uncompressed_sent_bytes;
    layers.push_back(std::move(layer));
  }
  j["layer_bytes"] = std::move(layers);
  Json epochs = Json::array();
  for (const EpochMetrics& m : r.per_epoch) {
    epochs.push_back(EpochJson(m));
  }
  j["per_epoch"] = std::move(epochs);
  return JsonLine(j) + "\n";
}

}  // namespace nereid
