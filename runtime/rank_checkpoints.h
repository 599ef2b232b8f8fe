#ifndef NEREID_RUNTIME_RANK_CHECKPOINTS_H_
#define NEREID_RUNTIME_RANK_CHECKPOINTS_H_

// A run's checkpoints as the ranks write them: rank 0 the state every rank
// shares (DIR/epoch-<N>.ckpt), each rank its own beside it
// (DIR/rank-<r>/epoch-<N>.ckpt: error-feedback residuals, look-ahead
// gradients, shards), so a resume restores each rank's own.

#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "runtime/checkpoint.h"
#include "runtime/trainer.h"
#include "schedulers/executor.h"

namespace nereid {

// What identifies a run to its checkpoints: the plan (its fingerprint: the
// model, the passes, the world size) and the data order (dataset, seed,
// batch, examples used), as "key=value;...".
std::string RunIdentity(const TrainOptions& options, const std::string& plan_fingerprint,
                        const std::string& dataset);

// Whether a checkpoint written with `written` may resume a run with
// `current`: an error naming every setting that differs, both sides.
absl::Status CheckResumable(const std::string& path, const std::string& written, const std::string& current);

// Where rank `rank` keeps its per-rank state.
std::string PerRankCheckpointDir(const std::string& dir, int rank);

absl::Status SaveCheckpoints(const TrainOptions& options, const std::string& run_identity, int64_t epochs_completed,
                             int64_t step, bool within_epoch, const Executor& executor,
                             const absl::flat_hash_set<std::string>& per_rank);

// Restores this rank's per-rank state for the epoch the shared checkpoint
// `at` was written after; its absence is an error, not a silent zero.
absl::Status RestorePerRankState(const TrainOptions& options, const Checkpoint& at, Executor& executor);

// The first parameter (or optimizer state) holding a NaN or an infinity, if
// any: a diverged model must not be checkpointed or reported as trained.
std::optional<std::string> FirstNonFiniteState(const Executor& executor);

}  // namespace nereid

#endif  // NEREID_RUNTIME_RANK_CHECKPOINTS_H_
