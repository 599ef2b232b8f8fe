#ifndef NEREID_SCHEDULERS_PROGRESS_EXCHANGE_H_
#define NEREID_SCHEDULERS_PROGRESS_EXCHANGE_H_

// ProgressExchange: progress tracking across processes, as in Naiad. Every
// process (rank) holds a ProgressState of the whole computation: the locations
// of every rank, with the same Reachability and the same initial capabilities.
// A rank applies its own batches at once (Local, with every check of
// ProgressState::Apply) and broadcasts each as an encoded batch carrying its rank
// and a sequence number; peers apply it (Absorb) in per-sender order. Batches
// from different senders may arrive in any order, so a peer's retirement can
// arrive before the creation it retires (sent by a third rank): Absorb applies
// with ApplyRemote, where a count may be negative for a while, and frontiers
// read positive counts only. This is Naiad's protocol; Abadi, Isard, McSherry
// and Murray ("Formal analysis of a distributed algorithm for tracking progress",
// FORTE 2013) show a process's frontier then stays conservative. So a frontier
// that spans ranks, e.g. the least step any rank may still produce at an
// exchange location, is read locally, without asking anyone.
//
// The protocol a caller keeps: a rank retires only work it holds, and only
// after it has absorbed the batch that created it (data travels behind the
// progress batch that counts it); Local refuses a retirement its state has not
// seen created (the count would go negative). Every batch Local returns is sent
// to every peer, in order.
//
// Wire format, version 1 (all varints as protobuf's CodedOutputStream writes
// them; signed values zigzag-encoded):
//   "NPXB" | version | rank | sequence | n | n x (location, epoch, depth,
//   depth x counter, delta) | CRC-32 (zlib) of everything before it, 4 bytes
//   little-endian.
// Decoding checks every length against the bytes left and the limits below
// before it allocates, and the checksum before it returns.
//
// Laws (progress_exchange_test.cc tests each under its name):
//   EncodingRoundTrips         DecodeProgressBatch(EncodeProgressBatch(r, s, d))
//                              gives back r, s and d.
//   MalformedBatchIsRefused    every truncation, every single-byte change, a wrong
//                              magic or version, trailing bytes and lengths beyond
//                              the limits are refused (DataLoss), never a crash or
//                              an allocation sized by the input.
//   BatchesApplyInSenderOrder  Absorb refuses a batch whose sequence is not the
//                              sender's next (FailedPrecondition naming the rank
//                              and both sequence numbers), its own rank's batch and
//                              an unknown rank (InvalidArgument); nothing changes.
//   EveryRankEndsWithTheSameCounts
//                              once every batch has reached every peer, in any
//                              interleaving that keeps each sender's order, all
//                              ranks hold the same counts, so the same frontiers.
//   ViewsAreConservative       at every moment, a rank's IsComplete(t, l) implies
//                              the true state (every Local batch, in the order
//                              they happened) is complete at (t, l); each rank's
//                              frontiers never move backwards.
//
// Not thread-safe: callers serialise access (one communicator thread, say).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "schedulers/progress_state.h"
#include "schedulers/reachability.h"

namespace nereid {

inline constexpr uint32_t kProgressBatchVersion = 1;
inline constexpr int kMaxProgressBatchDeltas = 1 << 20;
inline constexpr int kMaxProgressBatchDepth = 64;

struct ProgressBatch {
  int rank = 0;
  uint64_t sequence = 0;
  std::vector<ProgressDelta> deltas;
};

// The wire bytes of one batch. rank >= 0, deltas.size() <= kMaxProgressBatchDeltas
// and depths <= kMaxProgressBatchDepth are preconditions: Decode refuses a
// batch encoded outside them (ProgressExchange::Local checks them first).
std::string EncodeProgressBatch(int rank, uint64_t sequence, absl::Span<const ProgressDelta> deltas);

// DataLoss, saying what is wrong and where, for anything but a whole batch.
absl::StatusOr<ProgressBatch> DecodeProgressBatch(std::string_view encoded);

class ProgressExchange {
 public:
  // InvalidArgument unless 0 <= rank < num_ranks, or when ProgressState::Create
  // refuses the reachability or the initial capabilities.
  static absl::StatusOr<ProgressExchange> Create(int rank, int num_ranks,
                                                 std::shared_ptr<const Reachability> reachability,
                                                 absl::Span<const ProgressDelta> initial = {});

  // Applies a local batch (ProgressState::Apply's checks, plus the wire limits)
  // and returns its encoding, to send to every peer. On error nothing changes
  // and no sequence number is used.
  absl::StatusOr<std::string> Local(absl::Span<const ProgressDelta> deltas);

  // Applies a peer's encoded batch, if it is the sender's next. On error nothing
  // changes.
  absl::Status Absorb(std::string_view encoded);

  const ProgressState& state() const { return state_; }
  int rank() const { return rank_; }
  int num_ranks() const { return num_ranks_; }
  // The sequence number of the next local batch, and the next one expected from `sender`.
  uint64_t next_sequence() const { return next_sequence_; }
  uint64_t expected_sequence(int sender) const;

 private:
  ProgressExchange(int rank, int num_ranks, ProgressState state)
      : rank_(rank), num_ranks_(num_ranks), state_(std::move(state)), expected_(num_ranks, 0) {}

  int rank_;
  int num_ranks_;
  ProgressState state_;
  uint64_t next_sequence_ = 0;
  std::vector<uint64_t> expected_;  // per sender
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_PROGRESS_EXCHANGE_H_
