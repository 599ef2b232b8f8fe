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
#include "runtime/rank_checkpoints.h"
#include "runtime/run_metrics.h"
#include "runtime/stall_check.h"
#include "runtime/step_log.h"
#include "runtime/strategy_runtime.h"
#include "runtime/test_set_evaluation.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

int64_t PeakRssBytes() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace

absl::StatusOr<TrainResult> TrainingRun::Summarize() {
  result_.epochs = static_cast<int64_t>(result_.per_epoch.size());
  if (!result_.per_epoch.empty()) {
    result_.final_train_loss = result_.per_epoch.back().train_loss;
    result_.final_test_accuracy = result_.per_epoch.back().test_accuracy;
  }
  result_.samples_per_second = train_seconds_ > 0 ? train_samples_ / train_seconds_ : 0;
  if (positions_ > 1) result_.tokens_per_second = result_.samples_per_second * static_cast<double>(positions_);
  result_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  result_.peak_rss_bytes = PeakRssBytes();
  result_.peak_tensor_bytes = BufferPool::Global().stats().peak_bytes_in_use;
  if (group_ != nullptr) RETURN_IF_ERROR(group_->CheckSameState(*executor_, per_rank_, step_));
  result_.parameter_fingerprint = DataParallelGroup::StateFingerprint(*executor_, per_rank_);
  result_.state_fingerprint = DataParallelGroup::StateFingerprint(*executor_, {});
  if (hooks_ != nullptr) RETURN_IF_ERROR(hooks_->Summarize(context_, result_.strategy_metrics));
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
                                absl::ToDoubleSeconds(group_->world_busy_time()),
                                absl::ToDoubleSeconds(group_->world_codec_time())};
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

}  // namespace nereid
