// The training loop (Train): set up (training_run_setup.cc), then per epoch
// the steps, up to K in flight, the test set and a checkpoint, then the
// run's figures (training_run_summary.cc). A strategy's own needs are its
// runtime hooks (strategy_runtime.h); this file names none.

#include "runtime/trainer.h"

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
#include "runtime/rank_checkpoints.h"
#include "runtime/run_metrics.h"
#include "runtime/stall_check.h"
#include "runtime/step_log.h"
#include "runtime/strategy_runtime.h"
#include "runtime/test_set_evaluation.h"
#include "runtime/training_run.h"
#include "schedulers/executor.h"

namespace nereid {

absl::StatusOr<EpochMetrics> TrainingRun::TrainEpoch(int64_t epoch) {
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
    context_.step = step_;
    std::optional<StepFeeds> given;
    if (hooks_ != nullptr) {
      ASSIGN_OR_RETURN(given, hooks_->NextFeeds(context_));
    }
    if (!given.has_value()) {
      std::optional<data::Batch> batch = loader_->Next();
      if (!batch) break;
      ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch, feed_layout_));
      given = StepFeeds{std::move(feeds), batch->size};
    }
    FeedMap feeds = std::move(given->feeds);
    const int64_t examples = given->examples;
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
    // --eval-every: the test set within the epoch (its end scores it anyway).
    if (options_.eval_every > 0 && step_ % options_.eval_every == 0 && index < steps_per_epoch_ &&
        !(options_.max_steps > 0 && step_ >= options_.max_steps)) {
      while (!flight.empty()) RETURN_IF_ERROR(FinishOldest(flight, epoch_start, sums));
      RETURN_IF_ERROR(EvaluateWithinEpoch(epoch));
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
  context_.step = step_;
  if (hooks_ != nullptr) RETURN_IF_ERROR(hooks_->EndEpoch(context_, m));
  m.seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start);
  m.train_loss = sums.samples > 0 ? sums.loss / sums.samples : 0;
  m.samples_per_second = m.seconds > 0 ? sums.samples / m.seconds : 0;
  if (positions_ > 1) m.tokens_per_second = m.samples_per_second * static_cast<double>(positions_);
  train_seconds_ += m.seconds;
  train_samples_ += sums.samples;
  return m;
}

absl::Status TrainingRun::EvaluateEpoch(EpochMetrics& m) {
  RETURN_IF_ERROR(ScoreTestSet(m, m.epoch + 1 == options_.epochs || ReachedMaxSteps(), /*within_epoch=*/false));
  progress_->EpochDone(m);
  if (step_log_ != nullptr) step_log_->Write("epoch", EpochJson(m));
  result_.per_epoch.push_back(m);
  return absl::OkStatus();
}

absl::Status TrainingRun::EvaluateWithinEpoch(int64_t epoch) {
  EpochMetrics m;
  m.epoch = epoch;
  RETURN_IF_ERROR(ScoreTestSet(m, /*last=*/false, /*within_epoch=*/true));
  m.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  progress_->EvaluatedAt(m);
  if (step_log_ != nullptr) step_log_->Write("evaluation", EpochJson(m));
  result_.interval_evaluations.push_back(m);
  return absl::OkStatus();
}

absl::Status TrainingRun::ScoreTestSet(EpochMetrics& m, bool last, bool within_epoch) {
  RETURN_IF_ERROR(CheckFinite(m.epoch));
  m.step = step_;
  // The strategy's own steps first (gossip: the ranks' models averaged),
  // and the state to restore after scoring.
  NamedTensors own;
  context_.step = step_;
  if (hooks_ != nullptr) {
    ASSIGN_OR_RETURN(own, hooks_->BeforeEvaluation(context_, last, m));
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
  if (hooks_ != nullptr) {
    ASSIGN_OR_RETURN(Executor * own_evaluator, hooks_->Evaluator(context_, part));
    if (own_evaluator != nullptr) evaluator = own_evaluator;
  }
  ASSIGN_OR_RETURN(Evaluation eval, EvaluateTestSet(*evaluator, test_, options_, eval_batch_, part, shard_,
                                                    EqualShards(*graph_),
                                                    eval_info, group_.get(), feed_layout_));
  eval_span.End();
  for (auto& [name, value] : own) RETURN_IF_ERROR(executor_->SetState(name, value));
  m.test_accuracy = eval.accuracy;
  m.test_loss = eval.loss;
  if (positions_ > 1) m.test_bits_per_token = eval.loss / std::log(2.0);
  if (!std::isfinite(eval.loss)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the test loss became ", eval.loss, within_epoch ? absl::StrCat(" at step ", step_, " of epoch ", m.epoch + 1)
                                                        : absl::StrCat(" after epoch ", m.epoch + 1),
        ": training diverged (try a smaller learning rate); nothing was checkpointed"));
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::SaveCheckpoint(int64_t epoch) {
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  return SaveCheckpointAt(epoch, /*within_epoch=*/step_ < (epoch + 1) * steps_per_epoch_);
}

absl::Status TrainingRun::SaveCheckpointAt(int64_t epoch, bool within_epoch) {
  RETURN_IF_ERROR(CheckFinite(epoch));
  if (group_ != nullptr) RETURN_IF_ERROR(group_->CheckSameState(*executor_, per_rank_, step_));
  return SaveCheckpoints(options_, run_identity_, within_epoch ? epoch : epoch + 1, step_, within_epoch, *executor_,
                         per_rank_);
}

absl::Status TrainingRun::CheckFinite(int64_t epoch) const {
  if (std::optional<std::string> bad = FirstNonFiniteState(*executor_)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter ", *bad, " is not finite after epoch ", epoch + 1,
                                                   " (step ", step_, "): training diverged (try a smaller learning "
                                                   "rate); nothing was checkpointed"));
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::FinishOldest(std::deque<StepInFlight>& flight, absl::Time epoch_start, EpochLoss& sums) {
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
  if (std::optional<std::string> stalled = stall_check_.Check(result_.step_losses, progress_->total())) {
    result_.loss_not_improving = true;
    progress_->Warn(*stalled);
  }
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

namespace {

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

}  // namespace nereid
