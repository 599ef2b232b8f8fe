#ifndef NEREID_RUNTIME_TRAINING_RUN_H_
#define NEREID_RUNTIME_TRAINING_RUN_H_

// The training loop's state and steps (runtime/trainer.cc runs them): the
// set-up in training_run_setup.cc, the epochs in trainer.cc, the figures at
// the end in training_run_summary.cc. Internal to the trainer.

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/trace.h"
#include "data/batch_loader.h"
#include "data/datasets.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"
#include "runtime/batch_feeds.h"
#include "runtime/data_parallel_group.h"
#include "runtime/data_shard.h"
#include "runtime/periodic_reporter.h"
#include "runtime/progress_bar.h"
#include "runtime/stall_check.h"
#include "runtime/step_log.h"
#include "runtime/strategy_runtime.h"
#include "runtime/test_set_evaluation.h"
#include "runtime/trainer.h"
#include "schedulers/executor.h"

namespace nereid {

// One rank's training run, as the steps it is: Plan, Connect, LoadData,
// CreateExecutor, Resume, CheckStateAcrossRanks, then per epoch TrainEpoch,
// EvaluateEpoch and SaveCheckpoint, and at the end Summarize.
class TrainingRun {
 public:
  TrainingRun(const TrainOptions& options, TraceRecorder* trace)
      : options_(options), trace_(trace), start_(absl::Now()) {}

  // This rank's part of the plan: the launcher's, or one built here from the
  // model and the passes (plan/build_plan.h); finds the nodes evaluation reads.
  absl::Status Plan();

  // The nodes this rank fetches: the loss in training; in evaluation the
  // scores and the Sends that feed another rank's.
  bool HoldsLoss() const { return graph_->FindNode(loss_) != nullptr; }
  EvaluationPart EvaluationFetches() const;

  // With several workers: meets the other ranks (rendezvous, identity check).
  absl::Status Connect();

  absl::Status LoadData();

  // The executor and the training batch loader.
  absl::Status CreateExecutor();

  // --resume: the last complete checkpoint's state, epoch and step (none
  // yet: from the start).
  absl::Status Resume();

  // Every rank starts from rank 0's parameters; the collective engine starts
  // at this step. Then the training loop's bookkeeping starts.
  absl::Status CheckStateAcrossRanks();

  int64_t first_epoch() const { return first_epoch_; }
  bool ReachedMaxSteps() const { return options_.max_steps > 0 && result_.steps >= options_.max_steps; }

  // The epoch's steps, up to K in flight: step s starts once step s-K is
  // finished (the tracker's bound; StartStep waits for it), and each step's
  // loss is read when it finishes. Returns the epoch's loss and time, summed
  // over the ranks.
  absl::StatusOr<EpochMetrics> TrainEpoch(int64_t epoch);

  // The test set, sharded over the ranks, after every step of the epoch.
  absl::Status EvaluateEpoch(EpochMetrics& m);
  // --eval-every: the test set within the epoch, every step so far applied.
  absl::Status EvaluateWithinEpoch(int64_t epoch);

  // After `epoch`: a checkpoint of the whole epoch, or one within it when
  // --max-steps ended the run before the epoch's end (a resume goes on there).
  absl::Status SaveCheckpoint(int64_t epoch);

  // The run's figures (communication summed over the ranks, then per rank
  // and step), written as --metrics-json asks.
  absl::StatusOr<TrainResult> Summarize();

 private:
  struct StepInFlight {
    int64_t step, epoch, index, examples;
    absl::Time started;
  };
  struct EpochLoss {
    double loss = 0;  // summed over examples
    int64_t samples = 0;
  };

  // A checkpoint at the end of `epoch`, or within it at step_; the ranks
  // compare their parameters first, and nothing non-finite is written.
  absl::Status SaveCheckpointAt(int64_t epoch, bool within_epoch);

  // An error naming the first non-finite parameter, so nothing diverged is
  // evaluated, checkpointed or reported.
  absl::Status CheckFinite(int64_t epoch) const;

  // Scores the test set into m.test_loss/accuracy (and bits per position):
  // the strategy's hooks around it (`last`: the run's final scoring), the
  // ranks' batch-norm statistics averaged first.
  absl::Status ScoreTestSet(EpochMetrics& m, bool last, bool within_epoch);

  // Finishes the oldest step in flight: its trace span, its loss (a NaN ends
  // the run), the progress line.
  absl::Status FinishOldest(std::deque<StepInFlight>& flight, absl::Time epoch_start, EpochLoss& sums);

  const TrainOptions& options_;
  TraceRecorder* trace_;
  const absl::Time start_;
  TrainResult result_;
  std::unique_ptr<Graph> graph_;
  std::string logits_, loss_;
  std::shared_ptr<const PlanDef> plan_;  // every rank's, the same on every rank
  std::string plan_fingerprint_;  // of the whole plan
  std::string run_identity_;      // written into checkpoints, compared on --resume
  DataShard shard_;
  int progress_rank_ = 0;  // the rank that prints progress (the first holding the loss)
  bool placed_ = false;    // the plan runs different nodes on different ranks
  std::unique_ptr<StrategyRuntime> hooks_;  // the strategy's runtime (null: none needed)
  StrategyContext context_;                 // what the hooks are lent
  std::unique_ptr<DataParallelGroup> group_;
  std::shared_ptr<const data::Dataset> train_, test_;
  std::unique_ptr<Executor> executor_;
  FeedLayout feed_layout_;  // how batches feed this rank's images Input
  absl::flat_hash_set<std::string> per_rank_;
  absl::flat_hash_set<std::string> running_statistics_;  // per-rank, averaged before each evaluation
  std::unique_ptr<data::BatchLoader> loader_;
  int64_t steps_per_epoch_ = 0;
  int64_t eval_batch_ = 1000;  // EvaluationBatch of the plan
  absl::Time first_step_started_ = absl::InfinitePast();
  int64_t resume_index_ = 0;  // the first epoch's first batch after a resume within it
  StallCheck stall_check_{options_.stall_check_percent};
  int64_t first_epoch_ = 0, step_ = 0;
  int in_flight_ = 1;
  std::unique_ptr<PeriodicReporter> waiting_reporter_;
  std::unique_ptr<ProgressBar> progress_;
  TrafficCounters traffic_in_steps_;
  std::unique_ptr<StepLog> step_log_;  // --log-jsonl, on the rank printing progress
  int64_t traffic_logged_ = 0;         // this rank's bytes sent when the last step was logged
  double train_seconds_ = 0;
  int64_t train_samples_ = 0;
  int64_t positions_ = 1;  // labels per example: > 1 for sequence data
  std::string token_;      // what a position is ("char" for text datasets)
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_TRAINING_RUN_H_
