#ifndef NEREID_RUNTIME_TRAINER_H_
#define NEREID_RUNTIME_TRAINER_H_

// The training driver behind `nereid run`: plans the model (or takes a plan),
// feeds batches from the data loader into the executor step by step, reports
// progress, evaluates on the test set after every epoch, checkpoints, and
// writes the metrics.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compress/layer_bytes.h"
#include "core/json.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"

namespace nereid {

struct TrainOptions {
  std::string model_path;
  // The plan the local launcher built (plan/build_plan.h) for every rank;
  // null: this rank builds it from model_path and passes.
  std::shared_ptr<const PlanDef> plan;
  // Ignored for a plan. "" = the default pipeline; with workers > 1,
  // data_parallel is added after autodiff when there is no communication pass.
  std::string passes;
  // Data parallelism: this process is rank `rank` of `workers`, meeting the
  // others through `rendezvous` ("file:DIR", "redis://HOST:PORT"). The
  // launcher (runtime/launcher/) starts local workers with these set.
  int workers = 1;
  int rank = 0;
  // `nereid run --servers S`: the plan must have S parameter servers (its
  // last S ranks, included in `workers`); -1: not asked.
  int servers = -1;
  std::string rendezvous;
  std::string run_id = "default";
  // The run's secret token (comm/run_token.h); "" for none.
  std::string rendezvous_token;
  // The address this worker's Gloo device listens on and peers connect to
  // (an interface's address on a real cluster or an emulated one).
  std::string bind_address = "127.0.0.1";
  absl::Duration comm_timeout = absl::Seconds(60);
  // The communicator backend: "gloo" (TCP), "shm" (every rank on one host) or
  // "hierarchical" (shm within each host, gloo across).
  std::string transport = "gloo";
  int threads = 1;
  int64_t epochs = 1;
  int64_t batch = 64;
  uint64_t seed = 0;
  std::string dataset;          // "" = the model's `dataset` attribute
  std::string data_dir;         // "" = the dataset's default
  std::string normalize = "default";  // --normalize: data/normalize.h
  // Gossip plans: what each epoch's evaluation but the last scores: "ranks"
  // (each rank's own model on its shard of the test set) or "average" (the
  // ranks' average; each rank then goes on from its own). The last epoch
  // scores the average, which every rank adopts.
  std::string gossip_eval = "ranks";
  int64_t train_limit = 0;      // 0 = every example (tests use fewer)
  int64_t test_limit = 0;
  int64_t eval_batch = 1000;
  int64_t max_steps = 0;        // 0 = whole epochs; else stop after this many steps (benchmarks)
  // With several workers: every this many steps (and before every checkpoint
  // and at the end) the ranks compare a fingerprint of their parameters, so
  // ranks that drift apart are an error naming the step and the ranks. 0:
  // only before checkpoints and at the end.
  int64_t check_every = 500;
  std::string metrics_json;     // "" = none
  std::string log_jsonl;        // "" = none: the per-step log (runtime/step_log.h)
  std::string revision;         // the source revision the metrics name ("" = not said); set by the CLI
  // "" = none; else a Chrome trace-event timeline of the run (nodes,
  // collectives, waits, steps, evaluations): this path for one worker, with
  // ".rank<r>" before the extension for rank r of several (TracePathForRank).
  // Written also when training fails.
  std::string trace_path;
  std::string checkpoint_dir;   // "" = none
  bool resume = false;
  // Check every message's CRC, tag and order, and that every collective's
  // result is equal on all ranks (comm/message_verification.h).
  bool verify_messages = false;
  int64_t checkpoint_every = 0;  // > 0: also a checkpoint every this many steps within an epoch
  // > 0: also score the test set every this many steps within an epoch (the
  // learning curve of a long epoch); each epoch's end scores it anyway.
  int64_t eval_every = 0;
  // After this percent of the run's steps, a loss not below its start is
  // flagged (progress and metrics: loss_not_improving); 0: never checked.
  int64_t stall_check_percent = 50;
  std::FILE* progress = stderr;  // null = silent
  // Called after every step and evaluation batch ("phase=train epoch=0
  // step=12"): the launcher's liveness signal.
  std::function<void(const std::string&)> report;
  // Called with the run's error, if it fails, while this rank's connections
  // are still open (null: none). Its peers fail once they close, and a
  // launcher stops every worker at the first exit, so an error written after
  // the teardown could be lost and a peer's "connection closed" blamed.
  std::function<void(const absl::Status&)> report_error;
};

struct EpochMetrics {
  int64_t epoch = 0;
  int64_t step = 0;  // steps taken when the test set was scored
  double train_loss = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_second = 0;
  // Sequence data (one label per position): positions trained per second
  // over the ranks, and the test loss in bits per position; 0 otherwise.
  double tokens_per_second = 0;
  double test_bits_per_token = 0;
  double seconds = 0;
  // What the strategy's runtime adds (runtime/strategy_runtime.h): figures
  // for the metrics' epoch (gossip: consensus_distance; coded, on the
  // master: coded_workers_present, coded_results_decoded) and the progress line.
  Json strategy = Json::object();
  std::string note;
};

struct TrainResult {
  std::string model;
  int64_t epochs = 0;
  int64_t steps = 0;
  double final_train_loss = 0;
  double final_test_accuracy = 0;
  double samples_per_second = 0;
  double tokens_per_second = 0;  // sequence data: positions per second (0 otherwise)
  double wall_seconds = 0;
  int64_t peak_rss_bytes = 0;
  int64_t peak_tensor_bytes = 0;
  std::string strategy = "single";
  std::string transport;  // the communicator backend of a multi-rank run ("gloo", "shm", "hierarchical"); "" for one worker
  // What the strategy's runtime reports, merged into the metrics (gossip:
  // push_sum_weight_total; coded: the encoding phase and the decodes).
  Json strategy_metrics = Json::object();
  std::string dataset;        // the training split's name
  std::string normalization;  // what was applied to the inputs (data/normalize.h)
  int64_t pipeline_width = 1;   // steps in flight (Pipe-SGD's K)
  std::string compression = "none";
  // Mean over workers of the bytes each sent and received per training step.
  double bytes_sent_per_step = 0;
  double bytes_received_per_step = 0;
  // Mean over workers, per training step: time the collective engine spent
  // in communication work, and the encoding/decoding part of it (codecs).
  double comm_seconds_per_step = 0;
  double codec_seconds_per_step = 0;
  // Per-layer gradient bytes of the plan (compress/layer_bytes.h).
  std::vector<LayerBytes> layer_bytes;
  // FNV-1a of every parameter's final bytes (equal on every rank), shards
  // and other per-rank state left out: nothing of a plan whose ranks each
  // hold their own parameters (SGP, servers, coded computing).
  uint64_t parameter_fingerprint = 0;
  // FNV-1a of all of this rank's final state, its own included.
  uint64_t state_fingerprint = 0;
  // Bytes of this rank's parameters and optimizer state, and of the part
  // that is this rank's own (shards, their optimizer state, residuals).
  int64_t state_bytes = 0;
  int64_t per_rank_state_bytes = 0;
  // Every rank's peak tensor bytes and state bytes, by rank (one entry when
  // training alone).
  std::vector<int64_t> rank_peak_tensor_bytes;
  std::vector<int64_t> rank_state_bytes;
  // This rank's loss at each step it took, in order.
  std::vector<float> step_losses;
  // When each step this rank took finished, in seconds from this process's first
  // step's start (evaluation between epochs included): the steady step time
  // without the first step's start-up is (last - first) / (count - 1).
  std::vector<double> step_finished_seconds;
  // The loss had not gone below its start by stall_check_percent of the run.
  bool loss_not_improving = false;
  // Ranks per model-parallel group (1: none).
  int64_t model_parallel = 1;
  std::vector<EpochMetrics> per_epoch;
  // --eval-every: the test set scored within epochs (train loss and speed
  // are the epoch's, filled in at its end).
  std::vector<EpochMetrics> interval_evaluations;
  std::string passes;  // the pipeline the plan was made with ("" for a plan given as a file)
};

absl::StatusOr<TrainResult> Train(const TrainOptions& options);

// The metrics JSON `--metrics-json` writes.
std::string MetricsJson(const TrainOptions& options, const TrainResult& result);

}  // namespace nereid

#endif  // NEREID_RUNTIME_TRAINER_H_
