#include "runtime/rank_checkpoints.h"

#include <cmath>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/key_values.h"
#include "core/status_macros.h"

namespace nereid {

std::string RunIdentity(const TrainOptions& options, const std::string& plan_fingerprint,
                        const std::string& dataset) {
  return absl::StrCat("plan=", plan_fingerprint, ";workers=", options.workers, ";dataset=", dataset,
                      ";seed=", options.seed, ";batch=", options.batch, ";train_limit=", options.train_limit);
}

absl::Status CheckResumable(const std::string& path, const std::string& written, const std::string& current) {
  if (written.empty()) return absl::OkStatus();  // a version 1 file: nothing recorded to compare
  absl::StatusOr<KeyValues> recorded = ParseKeyValues(written, ';', absl::StrCat("--resume: ", path, ": run field"));
  if (!recorded.ok()) return recorded.status();
  ASSIGN_OR_RETURN(const KeyValues now, ParseKeyValues(current, ';', "this run's field"));
  const absl::flat_hash_map<std::string, std::string> theirs(recorded->begin(), recorded->end());
  std::vector<std::string> differences;
  for (const auto& [key, value] : now) {
    auto it = theirs.find(key);
    const std::string was = it == theirs.end() ? "(not recorded)" : it->second;
    if (was != value) differences.push_back(absl::StrCat(key, " ", was, " there, ", value, " here"));
  }
  if (differences.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--resume: ", path, " was written by another run (", absl::StrJoin(differences, "; "),
      "): resume with the settings it was written with, or start afresh in another --checkpoint directory"));
}

std::string PerRankCheckpointDir(const std::string& dir, int rank) { return absl::StrCat(dir, "/rank-", rank); }

absl::Status SaveCheckpoints(const TrainOptions& options, const std::string& run_identity, int64_t epochs_completed,
                             int64_t step, bool within_epoch, const Executor& executor,
                             const absl::flat_hash_set<std::string>& per_rank) {
  Checkpoint shared{epochs_completed, step, {}}, mine{epochs_completed, step, {}};
  shared.within_epoch = mine.within_epoch = within_epoch;
  shared.run_identity = mine.run_identity = run_identity;
  for (auto& [name, value] : executor.State()) {
    (per_rank.contains(name) ? mine : shared).tensors.emplace_back(name, std::move(value));
  }
  if (!mine.tensors.empty()) {
    RETURN_IF_ERROR(SaveCheckpoint(PerRankCheckpointDir(options.checkpoint_dir, options.rank), mine));
  }
  if (options.rank == 0) RETURN_IF_ERROR(SaveCheckpoint(options.checkpoint_dir, shared));
  return absl::OkStatus();
}

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

}  // namespace nereid
