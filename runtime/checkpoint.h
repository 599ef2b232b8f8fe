#ifndef NEREID_RUNTIME_CHECKPOINT_H_
#define NEREID_RUNTIME_CHECKPOINT_H_

// Checkpoints: every Parameter's value (trainable weights, optimizer state,
// running statistics) plus where training stands. Each checkpoint is one file
// written atomically (temporary file, fsync, rename), then a LATEST file
// naming it is replaced the same way, so a crash at any moment leaves the
// last complete checkpoint readable.
//
// File format (little-endian): "NEREIDCK" magic, u32 version, i64 epochs
// completed, i64 global step, (version 2) u32 length and the run's identity,
// u32 tensor count; per tensor: u32 name length, name, i32 dtype, u32 rank,
// i64 dims..., u64 byte count, bytes. A trailing u64 FNV-1a hash of
// everything before it detects corruption. Version 1 files (no identity)
// are still read.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace nereid {

struct Checkpoint {
  int64_t epochs_completed = 0;
  int64_t step = 0;  // the next global step to run
  // Written inside an epoch (--checkpoint-every): DIR/epoch-<N>-step-<S>.ckpt,
  // N epochs completed and S the next step; else DIR/epoch-<N>.ckpt. Not
  // stored in the file: the name says it.
  bool within_epoch = false;
  // Which run wrote it (model, plan, world size, data order: "key=value;..."),
  // so a resume refuses another run's checkpoint; empty in version 1 files.
  std::string run_identity;
  std::vector<std::pair<std::string, Tensor>> tensors;
  // Set by LoadLatestCheckpoint: the file read, and why it is not the one
  // LATEST names when it is not (empty otherwise).
  std::string path;
  std::string fallback_reason;
};

// The file name `checkpoint` is written under (see within_epoch).
std::string CheckpointFileName(const Checkpoint& checkpoint);
// Writes DIR/<CheckpointFileName> and points DIR/LATEST at it (creating DIR);
// then removes the checkpoints written within an epoch that are older (a
// resume needs only the newest; epoch checkpoints are all kept).
absl::Status SaveCheckpoint(const std::string& dir, const Checkpoint& checkpoint);
// Reads the checkpoint DIR/LATEST names. When LATEST is missing, names no
// file, or names a missing or corrupt one (a crash between the two atomic
// writes, a damaged disk), the newest valid checkpoint file is read instead
// and fallback_reason says why. NotFound if DIR holds no checkpoint at all;
// DataLoss, naming each file's fault, if it holds only damaged ones.
absl::StatusOr<Checkpoint> LoadLatestCheckpoint(const std::string& dir);
// Removes temporary files (*.tmp.<pid>) that a writer killed mid-write left in
// DIR, where <pid> is no longer a running process. Returns how many.
int RemoveStaleTemporaryFiles(const std::string& dir);
absl::StatusOr<Checkpoint> ReadCheckpointFile(const std::string& path);

}  // namespace nereid

#endif  // NEREID_RUNTIME_CHECKPOINT_H_
