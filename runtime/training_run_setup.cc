#include "runtime/training_run.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "comm/fault_plan.h"
#include "core/buffer_pool.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "core/trace.h"
#include "core/version.h"
#include "data/batch_loader.h"
#include "data/datasets.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "ops/collective_schedule.h"
#include "ops/placement_propagation.h"
#include "plan/build_plan.h"
#include "runtime/batch_feeds.h"
#include "runtime/checkpoint.h"
#include "runtime/data_parallel_group.h"
#include "runtime/data_shard.h"
#include "runtime/periodic_reporter.h"
#include "runtime/progress_bar.h"
#include "plan/plan_file.h"
#include "runtime/rank_checkpoints.h"
#include "runtime/run_metrics.h"
#include "runtime/stall_check.h"
#include "runtime/step_log.h"
#include "runtime/strategy_runtime.h"
#include "runtime/test_set_evaluation.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

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

}  // namespace

absl::Status TrainingRun::Plan() {
  if (trace_ != nullptr) trace_->NameThisThread("driver");
  if (options_.plan != nullptr) {
    plan_ = options_.plan;
  } else {
    PlanTarget target{options_.workers, options_.servers};
    ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, PipelineFor(options_.passes, target));
    ASSIGN_OR_RETURN(BuiltPlan built, BuildPlan(PlanRequest{options_.model_path, std::move(pipeline), target,
                                                            options_.dataset}));
    plan_ = std::make_shared<const PlanDef>(std::move(built.plan));
  }
  const int world = plan_->replicated() ? plan_->config().world_size() : plan_->worker_size();
  if (world != options_.workers) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.model_path, ": the plan is for ", world, " workers, not ", options_.workers));
  }
  eval_batch_ = EvaluationBatch(*plan_, options_);
  ASSIGN_OR_RETURN(RankPlan mine, LoadRankPlan(*plan_, options_.rank, options_.model_path));
  graph_ = std::move(mine.graph);
  progress_rank_ = mine.loss_rank;
  // A plan file whose fingerprint was cleared (to accept an edit) is
  // fingerprinted here: the ranks and the checkpoints compare the graphs.
  plan_fingerprint_ = plan_->fingerprint().empty() ? PlanDefFingerprint(*plan_) : plan_->fingerprint();
  result_.passes = plan_->config().passes();
  placed_ = HasPlacedNodes(*graph_);
  result_.model = GraphAttr(*graph_, "name").empty() ? options_.model_path : GraphAttr(*graph_, "name");
  logits_ = GraphAttr(*graph_, "logits");
  loss_ = GraphAttr(*graph_, "loss");
  if (logits_.empty() || loss_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options_.model_path, ": the graph attributes 'logits' and 'loss' must name the nodes to evaluate"));
  }
  hooks_ = StrategyRuntimeRegistry::Global().For(*graph_);
  if (options_.gossip_eval != "ranks" && (hooks_ == nullptr || !hooks_->KeepsPerRankModels())) {
    return absl::InvalidArgumentError(absl::StrCat("--gossip-eval ", options_.gossip_eval,
                                                   " is for gossip plans (SGP); this plan has every rank's "
                                                   "model the same"));
  }
  ASSIGN_OR_RETURN(shard_, DataShardOf(*graph_, options_.rank, options_.workers));
  if (hooks_ != nullptr) shard_ = hooks_->Shard(shard_);
  context_.options = &options_;
  context_.graph = graph_.get();
  context_.plan = plan_.get();
  context_.per_rank = &per_rank_;
  return absl::OkStatus();
}

EvaluationPart TrainingRun::EvaluationFetches() const {
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

absl::Status TrainingRun::Connect() {
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
  g.token = options_.rendezvous_token;
  g.hostname = options_.bind_address;
  g.timeout = options_.comm_timeout;
  g.plan_fingerprint = plan_fingerprint_;
  g.settings = RunSettings(options_);
  g.verify_messages = options_.verify_messages;
  g.backend = options_.transport;
  if (options_.report) options_.report("phase=startup stage=rendezvous");
  ASSIGN_OR_RETURN(group_, DataParallelGroup::Join(*graph_, g));
  context_.group = group_.get();
  result_.transport = options_.transport;
  std::tie(result_.strategy, result_.model_parallel) = PlainStrategyOf(*graph_, options_.workers, shard_.count);
  if (hooks_ != nullptr) {
    result_.strategy = hooks_->name();
    result_.model_parallel = std::max(1, graph_->header().records().model_parallel());
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

absl::Status TrainingRun::LoadData() {
  std::string dataset_name = options_.dataset.empty() ? GraphAttr(*graph_, "dataset") : options_.dataset;
  // A parameter server's part has no data Input: the samples' shape (a text
  // window's length, synthetic images') is read from rank 0's part, a reader.
  std::unique_ptr<Graph> reader;
  if (ImagesInput(*graph_) == nullptr) {
    ASSIGN_OR_RETURN(RankPlan first, LoadRankPlan(*plan_, 0, options_.model_path));
    reader = std::move(first.graph);
  }
  data::DatasetOptions dopts = DatasetOptionsFor(reader != nullptr ? *reader : *graph_, dataset_name, options_);
  ASSIGN_OR_RETURN(dopts.normalize, data::ParseNormalization(options_.normalize));
  dopts.limit = options_.train_limit;
  ASSIGN_OR_RETURN(data::Dataset train_set, data::LoadNamedDataset(dataset_name, data::Split::kTrain, dopts));
  dopts.limit = options_.test_limit;
  ASSIGN_OR_RETURN(data::Dataset test_set, data::LoadNamedDataset(dataset_name, data::Split::kTest, dopts));
  result_.dataset = train_set.name;
  result_.normalization = train_set.normalization;
  positions_ = std::max<int64_t>(1, train_set.labels_per_example);
  token_ = data::IsTextDataset(dataset_name) ? "char" : "token";
  train_ = std::make_shared<const data::Dataset>(std::move(train_set));
  test_ = std::make_shared<const data::Dataset>(std::move(test_set));
  context_.train = train_;
  if (hooks_ != nullptr) RETURN_IF_ERROR(hooks_->Prepare(context_));
  return absl::OkStatus();
}

absl::Status TrainingRun::CreateExecutor() {
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
  context_.executor = executor_.get();
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
  if (hooks_ != nullptr) steps_per_epoch_ = hooks_->StepsPerEpoch(steps_per_epoch_);
  return absl::OkStatus();
}

absl::Status TrainingRun::Resume() {
  // What the plan computes, not where: a checkpoint resumes on another device.
  run_identity_ = RunIdentity(options_, ComputationFingerprint(*plan_), result_.dataset);
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
  RETURN_IF_ERROR(CheckResumable(ckpt->path, ckpt->run_identity, run_identity_));
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

absl::Status TrainingRun::CheckStateAcrossRanks() {
  // While this rank waits in a collective for its peers it is not hung: say
  // so every second, so the launcher blames the rank that stopped instead
  // (from the first check on: a peer may stop before it).
  if (group_ != nullptr && options_.report) {
    DataParallelGroup* group = group_.get();
    const TrainOptions* options = &options_;
    waiting_reporter_ = std::make_unique<PeriodicReporter>(absl::Seconds(1), [group, options] {
      if (std::optional<std::string> what = group->WaitingFor()) {
        options->report(absl::StrCat("phase=", *what, " waiting_for_peers"));
      }
    });
  }
  if (group_ != nullptr) {
    RETURN_IF_ERROR(group_->CheckIdenticalState(*executor_, per_rank_));
    group_->StartAt(step_);
    group_->SetTrace(trace_);
  }
  BufferPool::Global().ResetPeak();
  progress_ = std::make_unique<ProgressBar>(options_.rank == progress_rank_ ? options_.progress : nullptr, options_.epochs,
                                         steps_per_epoch_, options_.max_steps, token_);
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
  const std::string& compression = graph_->header().records().compression().method();
  if (!compression.empty()) result_.compression = compression;
  return absl::OkStatus();
}

}  // namespace nereid
