#ifndef NEREID_SCHEDULERS_PROGRESS_TRACKER_H_
#define NEREID_SCHEDULERS_PROGRESS_TRACKER_H_

// ProgressTracker: Naiad's "could-result-in" frontier, specialised to Nereid's
// single training loop. It counts pointstamps (timestamp, location): how many
// pieces of pending work (messages, scheduled node runs) exist at each
// timestamp and graph location. Every location lies inside the loop, and a
// Feedback vertex carries step t to step t+1, so a pointstamp at t could result
// in work at every t' >= t; the frontier is therefore one timestamp, the least
// one with a nonzero count, and "t is complete" means no work at any time <= t
// can still exist or appear. The tracker also bounds pipelining: at most K
// steps in flight (K = 1: synchronous SGD; Pipe-SGD width K), stated as a bound
// on how far a new step may run ahead of the frontier.
//
// Laws (each has its own tests in progress_tracker_test.cc):
//   L1 Counts never go negative. An update that would drive any pointstamp's
//      count below zero is refused (FailedPrecondition naming the pointstamp)
//      and changes nothing.
//   L2 The frontier never moves backwards. Each frontier reported is >= every
//      frontier reported before it, also across idle periods when there is none.
//      A positive delta at a time below the greatest frontier so far, or at a
//      time that is already complete, is refused (FailedPrecondition). Hence
//      completion is permanent: once IsComplete(t), always IsComplete(t).
//   L3 A notification for t fires exactly once, after t is complete, never
//      before; and once t is complete it fires without waiting for any further
//      update (the call that made it ready delivers it; NotifyAt on a time
//      already complete runs it before returning, unless a delivery is already
//      under way, see below).
//   L4 Notifications fire in timestamp order. Callbacks run one at a time and
//      never under the tracker's lock; of the callbacks pending together, the
//      smaller timestamp runs first, equal timestamps in registration order.
//   L5 Step s may begin only when every step <= s - K is complete; steps below
//      b + K, where b is the first step begun, need nothing. A step-open delta that would begin a step outside the
//      window is refused (FailedPrecondition); MayBegin and WaitToBegin tell the
//      executor when it may. So at most K steps are ever in flight: with K = 1
//      steps never overlap; with K = 2 step s overlaps step s-1 only.
//   L6 A step is not complete before it has begun: IsComplete(t) holds iff
//      t <= the latest step-open timestamp ever created and no pointstamp at a
//      time <= t is active. A zero count alone proves nothing. Steps begin one
//      at a time, in order (the first step begun may be any; each later one is
//      the next step), and work is created only at a step already begun or at
//      the next one (where a Feedback puts it); other deltas are refused
//      (FailedPrecondition). So a step that has not begun never lies below the
//      frontier, and the next step's beginning is never refused by L2: the
//      tracker cannot wedge itself.
//   L7 Batches are atomic. Apply() sums its deltas per pointstamp, checks every
//      sum against the state before the batch, and applies all or none; no
//      reader, waiter or notification sees a state between two deltas of a batch.
//      A beginning is an event, not a count: a batch with a positive step-open
//      delta begins that step even if the batch closes it again.
//
// The executor's protocol (the step-open pointstamp, location kStepOpen):
//   1. Before beginning step s, call WaitToBegin(s, deadline) (or poll MayBegin).
//   2. Begin step s at timestamp t = (epoch, s): Update(t, kStepOpen, +1). The
//      first positive kStepOpen delta at a time later than every earlier one
//      records t as begun. A new beginning must be at the step after the last
//      one begun (its epoch equal or greater) and within the window (L5).
//   3. While the step-open pointstamp is held, create step s's initial work:
//      +1 at (t, node) for each node that has work at t. (Beginning and
//      creating may share one batch.)
//   4. Once all of it exists, retire the step-open pointstamp:
//      Update(t, kStepOpen, -1). Steps 2-4 may be one batch, {t, kStepOpen, +1},
//      the work, {t, kStepOpen, -1}: the step-open deltas sum to zero, but the
//      step has begun (L7).
//   5. When a node finishes and enables successors, retire and create in one
//      batch: Apply({{t, node, -1}, {t, succ, +1}, ...}). A Feedback node
//      retires at (e, s) and creates at (e', s + 1) in the same batch. Work at
//      a step not begun yet (only the next one) keeps that step, and every later
//      one, incomplete; it does not begin the step.
//   6. Step s is complete once its step-open pointstamp and all work at times
//      <= t are retired: notifications registered with NotifyAt(t) then fire
//      and WaitToBegin(s + K) returns.
// Locations are graph node ids (>= 0) or kStepOpen; epochs and steps are >= 0.
//
// Thread safety: every method may be called from any thread. Callbacks run on
// whichever thread made them ready (the caller of Update/Apply/NotifyAt), outside
// the lock, so a callback may call any method, including Update and NotifyAt; a
// callback registered or made ready while another callback runs is queued and
// run by the thread already delivering, after the running callback returns.
// Callbacks must not throw. The tracker must outlive the delivery of its
// callbacks; callbacks for times that never complete are destroyed, never run,
// with the tracker.
//
//   ProgressTracker tracker(/*max_steps_in_flight=*/1);
//   Timestamp t{0, 0};
//   tracker.NotifyAt(t, [] { /* step 0 is done */ });
//   RETURN_IF_ERROR(tracker.Apply({{t, kStepOpen, +1}, {t, /*node=*/3, +1}}));
//   RETURN_IF_ERROR(tracker.Update(t, kStepOpen, -1));
//   RETURN_IF_ERROR(tracker.Update(t, 3, -1));  // the callback runs here
//   tracker.MayBegin(1);                         // now true

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "schedulers/timestamp.h"

namespace nereid {

// The location of the step-open pointstamp (see the protocol above).
inline constexpr int kStepOpen = -1;

// "((e, s), node 7)" or "((e, s), step-open)".
std::string PointstampToString(Timestamp time, int location);

struct PointstampDelta {
  Timestamp time;
  int location = 0;  // a graph node id (>= 0) or kStepOpen
  int64_t delta = 0;
};

class ProgressTracker {
 public:
  // K = max_steps_in_flight must be >= 1: the constructor aborts with a message
  // otherwise (a programming error when K is a constant). Where K comes from
  // input (a plan's LoopScope.max_in_flight), use Create, which returns
  // InvalidArgument instead.
  explicit ProgressTracker(int max_steps_in_flight = 1);
  static absl::StatusOr<std::unique_ptr<ProgressTracker>> Create(int max_steps_in_flight);

  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  // Adjusts the count of pointstamp (t, location) by delta (0 is a no-op).
  // FailedPrecondition, naming the pointstamp, when the count would go
  // negative (L1), when delta > 0 at a time below the greatest frontier so far
  // or already complete (L2), when it begins a step outside the window (L5) or
  // out of order, or creates work beyond the step after the last one begun
  // (L6); InvalidArgument for a negative epoch or step, a location below
  // kStepOpen, or a count overflowing int64. On error nothing changes.
  absl::Status Update(Timestamp t, int location, int64_t delta);

  // Applies a batch atomically (L7), with Update's errors, judged per
  // pointstamp on the sum of its deltas against the state before the batch.
  absl::Status Apply(absl::Span<const PointstampDelta> deltas);

  // The least timestamp with a nonzero count; nullopt when nothing is active.
  std::optional<Timestamp> Frontier() const;

  // L6: t <= the latest step-open timestamp and no active pointstamp at <= t.
  bool IsComplete(Timestamp t) const;

  // L5: true when no step has begun yet (the first step begun sets the base
  // b), when step < b + K, or when step s - K is complete: it has begun (the
  // latest beginning's step is >= s - K) and no active pointstamp has a step
  // <= s - K. Meaningful for steps not begun yet. Ignores Cancel().
  bool MayBegin(int64_t step) const;

  // Blocks until MayBegin(step), the deadline passes, or Cancel() is called.
  // Returns OK, DeadlineExceeded (naming the step, the step it waited on and
  // the frontier), or Cancelled. Cancel is sticky: once called, WaitToBegin
  // returns Cancelled at once, even for a step that MayBegin.
  absl::Status WaitToBegin(int64_t step, absl::Time deadline);

  // Calls `callback` exactly once, after t becomes complete (L3), in timestamp
  // order (L4). If t is already complete and no callback is being delivered,
  // it runs on the calling thread before NotifyAt returns. An empty callback
  // is ignored.
  void NotifyAt(Timestamp t, std::function<void()> callback);

  // Wakes every WaitToBegin with Cancelled, now and later (shutdown on error).
  // Counts and notifications keep working.
  void Cancel();

  int max_steps_in_flight() const { return max_steps_in_flight_; }

  // Diagnostics. The count of one pointstamp (0 when absent), and the latest
  // step-open timestamp (nullopt before the first step begins).
  int64_t Count(Timestamp t, int location) const;
  std::optional<Timestamp> LastBegun() const;

 private:
  struct Pointstamp {
    Timestamp time;
    int location;
    bool operator<(const Pointstamp& o) const { return time != o.time ? time < o.time : location < o.location; }
  };
  std::optional<Timestamp> FrontierLocked() const;
  bool IsCompleteLocked(Timestamp t) const;
  // MayBegin with the given base (the first step begun, if any); a batch that
  // begins the first steps checks them against its own base.
  bool MayBeginLocked(int64_t step, std::optional<int64_t> first_begun_step) const;
  // Runs every pending callback whose time is complete, in order, releasing
  // `lock` around each call; returns at once if another call is delivering.
  void DeliverLocked(std::unique_lock<std::mutex>& lock);

  const int max_steps_in_flight_;

  mutable std::mutex mu_;
  std::condition_variable changed_;          // state advanced, or Cancel()
  std::map<Pointstamp, int64_t> counts_;     // only nonzero counts
  std::map<Timestamp, int64_t> active_;      // per time, pointstamps with a nonzero count
  std::optional<Timestamp> last_begun_;      // latest step-open timestamp
  std::optional<int64_t> first_begun_step_;  // the base of the first window
  std::optional<Timestamp> low_;             // greatest frontier so far (L2)
  // Notifications not yet run; equal keys keep insertion order (L4).
  std::multimap<Timestamp, std::function<void()>> pending_;
  bool delivering_ = false;
  bool cancelled_ = false;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_PROGRESS_TRACKER_H_
