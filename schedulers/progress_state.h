#ifndef NEREID_SCHEDULERS_PROGRESS_STATE_H_
#define NEREID_SCHEDULERS_PROGRESS_STATE_H_

// ProgressState: Naiad's pointstamp counts over a Reachability. A pointstamp
// (t, location) with a positive count is pending work (a message, a scheduled
// run, an input's capability) at time t and that location; it is active. The
// frontier at a location is the antichain of minimal times that could still
// arrive there: the times of active pointstamps at it and ResultsIn(s, t) for
// every active (t, l) and minimal summary s from l to it. (t, location) is
// complete when no active pointstamp could result in it, i.e. no frontier
// element is <= t. The computation's initial capabilities are given to Create;
// after that, work appears only where existing work could result in it
// (Naiad's safety condition), which is what keeps frontiers moving forward.
// The single-loop ProgressTracker (progress_tracker.h) is the depth-1 instance
// with one Feedback of +1 step, where every frontier is one timestamp.
//
// Laws (progress_state_test.cc tests each under its name):
//   CountsNeverNegative        Apply refuses a batch that would drive a count
//                              below zero (FailedPrecondition naming the
//                              pointstamp) and changes nothing.
//   BatchesAreAtomic           Apply sums its deltas per pointstamp, judges each
//                              sum against the state before the batch, and applies
//                              all or nothing.
//   WorkOnlyWhereWorkCouldResultIn
//                              a positive sum at p is refused (FailedPrecondition
//                              naming p) unless some pointstamp active before the
//                              batch (one the batch retires counts) could result
//                              in p. Work created by the same batch adds nothing:
//                              could-result-in is transitive, so a chain of
//                              creations is justified iff its root is.
//   FrontierNeverMovesBackwards
//                              after an accepted batch every element of
//                              Frontier(l) is >= some element of the frontier
//                              before it: the times that could still arrive only
//                              shrink. An empty frontier stays empty.
//   CompletionIsPermanent      once IsComplete(t, l), always; and IsComplete(t, l)
//                              iff no element of Frontier(l) is <= t.
//   FrontierIsTheMinimalTimesThatCouldArrive
//                              Frontier(l) is the antichain of minimal t' such
//                              that some active pointstamp could result in (t', l).
// ApplyRemote is the exchange's entry for a peer's batch (progress_exchange.h):
// it checks structure only, because a peer's retirement may arrive before the
// creation it retires (from a third rank), so a count may be negative for a
// while. Frontier and IsComplete read positive counts only.
//
// Not thread-safe: callers serialise access.

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "schedulers/antichain.h"
#include "schedulers/reachability.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {

struct Pointstamp {
  ScopedTimestamp time;
  int location = 0;

  // "((e; s), location 4)".
  std::string ToString() const;
};

inline bool operator==(const Pointstamp& a, const Pointstamp& b) {
  return a.location == b.location && a.time == b.time;
}
inline std::ostream& operator<<(std::ostream& os, const Pointstamp& p) { return os << p.ToString(); }

// A storage order (location, then time by ScopedTimestampKeyLess).
struct PointstampKeyLess {
  bool operator()(const Pointstamp& a, const Pointstamp& b) const;
};

struct ProgressDelta {
  ScopedTimestamp time;
  int location = 0;
  int64_t delta = 0;
};

class ProgressState {
 public:
  using Counts = std::map<Pointstamp, int64_t, PointstampKeyLess>;

  // `initial` holds the computation's initial capabilities (positive deltas, e.g.
  // each input at (0; 0)); every process of an exchange starts from the same.
  // InvalidArgument for a null reachability or an initial delta that is not
  // positive or not valid (see Apply).
  static absl::StatusOr<ProgressState> Create(std::shared_ptr<const Reachability> reachability,
                                              absl::Span<const ProgressDelta> initial = {});

  // Applies a local batch atomically. InvalidArgument (naming the pointstamp)
  // for an unknown location, a time whose depth is not the location's, a
  // negative epoch or counter, or a sum overflowing int64; FailedPrecondition
  // for a count going negative or work no active pointstamp could result in.
  // On error nothing changes.
  absl::Status Apply(absl::Span<const ProgressDelta> batch);

  // Applies a peer's batch atomically with the structural checks only (the
  // InvalidArgument cases of Apply); counts may go negative.
  absl::Status ApplyRemote(absl::Span<const ProgressDelta> batch);

  Antichain<ScopedTimestamp> Frontier(int location) const;
  bool IsComplete(const ScopedTimestamp& t, int location) const;

  // Whether some active pointstamp could result in p.
  bool CouldArrive(const Pointstamp& p) const;

  // The count of one pointstamp (0 when absent), and every nonzero count.
  int64_t Count(const ScopedTimestamp& t, int location) const;
  const Counts& counts() const { return counts_; }
  const Reachability& reachability() const { return *reachability_; }

 private:
  explicit ProgressState(std::shared_ptr<const Reachability> reachability) : reachability_(std::move(reachability)) {}

  // Structural checks and per-pointstamp sums (zero sums dropped).
  absl::StatusOr<Counts> Sum(absl::Span<const ProgressDelta> batch) const;
  // New counts for the sums; with `strict`, CountsNeverNegative and
  // WorkOnlyWhereWorkCouldResultIn are checked.
  absl::Status Commit(const Counts& sums, bool strict);

  std::shared_ptr<const Reachability> reachability_;
  Counts counts_;  // only nonzero counts; negative ones only through ApplyRemote
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_PROGRESS_STATE_H_
