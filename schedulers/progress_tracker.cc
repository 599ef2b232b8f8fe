#include "schedulers/progress_tracker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace nereid {
namespace {

std::string FrontierString(const std::optional<Timestamp>& f) { return f ? f->ToString() : "none"; }

}  // namespace

std::string PointstampToString(Timestamp time, int location) {
  if (location == kStepOpen) return absl::StrCat("(", time.ToString(), ", step-open)");
  return absl::StrCat("(", time.ToString(), ", node ", location, ")");
}

ProgressTracker::ProgressTracker(int max_steps_in_flight) : max_steps_in_flight_(max_steps_in_flight) {
  if (max_steps_in_flight < 1) {
    Log().critical("ProgressTracker needs max_steps_in_flight >= 1, got {}", max_steps_in_flight);
    std::abort();
  }
}

absl::StatusOr<std::unique_ptr<ProgressTracker>> ProgressTracker::Create(int max_steps_in_flight) {
  if (max_steps_in_flight < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress tracker: max_steps_in_flight must be >= 1 (1 is synchronous), got ", max_steps_in_flight));
  }
  return std::make_unique<ProgressTracker>(max_steps_in_flight);
}

absl::Status ProgressTracker::Update(Timestamp t, int location, int64_t delta) {
  const PointstampDelta d{t, location, delta};
  return Apply(absl::MakeConstSpan(&d, 1));
}

absl::Status ProgressTracker::Apply(absl::Span<const PointstampDelta> deltas) {
  // Sum the batch per pointstamp first: it is judged and applied as one change.
  // A beginning is an event, though, not a count: any positive step-open delta
  // counts, also when the same batch closes the step-open pointstamp again
  // ("begin step t, create its work, close it" in one batch).
  std::map<Pointstamp, int64_t> net;
  std::set<Timestamp> opened;
  for (const PointstampDelta& d : deltas) {
    if (d.time.epoch < 0 || d.time.step < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress tracker: pointstamp ", PointstampToString(d.time, d.location), ": epoch and step must be >= 0"));
    }
    if (d.location < kStepOpen) {
      return absl::InvalidArgumentError(absl::StrCat("progress tracker: pointstamp ",
                                                     PointstampToString(d.time, d.location),
                                                     ": location must be a node id (>= 0) or kStepOpen"));
    }
    if (d.delta == 0) continue;
    if (d.location == kStepOpen && d.delta > 0) opened.insert(d.time);
    int64_t& sum = net[Pointstamp{d.time, d.location}];
    if (__builtin_add_overflow(sum, d.delta, &sum)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress tracker: pointstamp ", PointstampToString(d.time, d.location), ": deltas overflow int64"));
    }
  }

  std::unique_lock<std::mutex> lock(mu_);
  // Everything is judged against the state before the batch (L7).
  auto refuse = [](const Pointstamp& ps, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("progress tracker: pointstamp ", PointstampToString(ps.time, ps.location), ": ", why));
  };
  auto refuse_positive = [&](const Pointstamp& ps) -> std::optional<absl::Status> {  // L2
    if (IsCompleteLocked(ps.time)) {
      return refuse(ps, absl::StrCat("created at a time already complete (frontier ", FrontierString(FrontierLocked()),
                                     ", last step begun ", last_begun_->ToString(), ")"));
    }
    if (low_ && ps.time < *low_) {
      return refuse(ps, absl::StrCat("created at a time before the frontier ", low_->ToString(),
                                     " (the greatest so far; the frontier never moves back)"));
    }
    return std::nullopt;
  };

  // The steps this batch begins, in order (L6, L5).
  std::optional<Timestamp> new_last_begun = last_begun_;
  std::optional<int64_t> first_begun_step = first_begun_step_;
  for (const Timestamp& t : opened) {
    if (last_begun_ && t <= *last_begun_) continue;  // another hold on a step begun already
    const Pointstamp ps{t, kStepOpen};
    if (auto refused = refuse_positive(ps)) return *refused;
    if (new_last_begun && t.step != new_last_begun->step + 1) {
      return refuse(ps, absl::StrCat("begins step ", t.step, ", but steps begin in order and the last one begun is ",
                                     new_last_begun->ToString()));
    }
    new_last_begun = t;
    if (!first_begun_step) first_begun_step = t.step;
    if (!MayBeginLocked(t.step, first_begun_step)) {
      return refuse(ps, absl::StrCat("step ", t.step, " may not begin before step ", t.step - max_steps_in_flight_,
                                     " completes (max_steps_in_flight ", max_steps_in_flight_, "; frontier ",
                                     FrontierString(FrontierLocked()), ")"));
    }
  }

  // Every pointstamp's sum.
  std::vector<std::pair<Pointstamp, int64_t>> updates;  // (pointstamp, new count)
  updates.reserve(net.size());
  for (const auto& [ps, delta] : net) {
    if (delta == 0) continue;
    auto it = counts_.find(ps);
    const int64_t count = it == counts_.end() ? 0 : it->second;
    int64_t updated;
    if (__builtin_add_overflow(count, delta, &updated)) {
      return absl::InvalidArgumentError(absl::StrCat("progress tracker: pointstamp ",
                                                     PointstampToString(ps.time, ps.location), ": count ", count, " + ",
                                                     delta, " overflows int64"));
    }
    if (updated < 0) {  // L1
      return refuse(ps, absl::StrCat("count ", count, " with delta ", delta, " would be negative (", updated,
                                     "): retired more often than created"));
    }
    if (delta > 0) {
      if (auto refused = refuse_positive(ps)) return *refused;
      if (ps.location != kStepOpen && (!new_last_begun || ps.time.step > new_last_begun->step + 1)) {  // L6
        return refuse(ps,
                      absl::StrCat("work may be created only at a step already begun or the next one (a "
                                   "Feedback's), but ",
                                   new_last_begun ? absl::StrCat("the last step begun is ", new_last_begun->ToString())
                                                  : std::string("no step has begun")));
      }
    }
    updates.emplace_back(ps, updated);
  }
  if (updates.empty() && new_last_begun == last_begun_) return absl::OkStatus();

  // Apply: nothing below can fail.
  for (const auto& [ps, updated] : updates) {
    auto it = counts_.find(ps);
    if (it == counts_.end()) {  // 0 -> positive
      counts_.emplace(ps, updated);
      ++active_[ps.time];
    } else if (updated == 0) {  // positive -> 0
      counts_.erase(it);
      auto at = active_.find(ps.time);
      if (--at->second == 0) active_.erase(at);
    } else {
      it->second = updated;
    }
  }
  last_begun_ = new_last_begun;
  first_begun_step_ = first_begun_step;
  if (std::optional<Timestamp> f = FrontierLocked(); f && (!low_ || *f > *low_)) low_ = f;

  changed_.notify_all();
  DeliverLocked(lock);
  return absl::OkStatus();
}

std::optional<Timestamp> ProgressTracker::Frontier() const {
  std::lock_guard<std::mutex> lock(mu_);
  return FrontierLocked();
}

bool ProgressTracker::IsComplete(Timestamp t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return IsCompleteLocked(t);
}

bool ProgressTracker::MayBegin(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  return MayBeginLocked(step, first_begun_step_);
}

absl::Status ProgressTracker::WaitToBegin(int64_t step, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (cancelled_) {
      return absl::CancelledError(absl::StrCat("progress tracker: cancelled while step ", step, " waited to begin"));
    }
    if (MayBeginLocked(step, first_begun_step_)) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "progress tracker: step ", step, " may not begin before step ", step - max_steps_in_flight_,
          " completes (max_steps_in_flight ", max_steps_in_flight_, "); frontier ", FrontierString(FrontierLocked()),
          ", last step begun ", last_begun_ ? last_begun_->ToString() : "none"));
    }
    // Wait on the steady clock in bounded slices, so an infinite or far deadline
    // never overflows the conversion; the loop re-checks everything.
    changed_.wait_for(lock, absl::ToChronoNanoseconds(std::min(left, absl::Hours(1))));
  }
}

void ProgressTracker::NotifyAt(Timestamp t, std::function<void()> callback) {
  if (!callback) return;  // nothing to call
  std::unique_lock<std::mutex> lock(mu_);
  pending_.emplace(t, std::move(callback));
  DeliverLocked(lock);
}

void ProgressTracker::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  changed_.notify_all();
}

int64_t ProgressTracker::Count(Timestamp t, int location) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(Pointstamp{t, location});
  return it == counts_.end() ? 0 : it->second;
}

std::optional<Timestamp> ProgressTracker::LastBegun() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_begun_;
}

std::optional<Timestamp> ProgressTracker::FrontierLocked() const {
  if (active_.empty()) return std::nullopt;
  return active_.begin()->first;
}

bool ProgressTracker::IsCompleteLocked(Timestamp t) const {
  if (!last_begun_ || t > *last_begun_) return false;  // L6
  return active_.empty() || t < active_.begin()->first;
}

bool ProgressTracker::MayBeginLocked(int64_t step, std::optional<int64_t> first_begun_step) const {
  if (!first_begun_step) return true;
  const int64_t base = *first_begun_step;
  if (step < base || step - base < max_steps_in_flight_) return true;  // the first window
  const int64_t waits_on = step - max_steps_in_flight_;                // >= base >= 0
  if (!last_begun_ || last_begun_->step < waits_on) return false;      // not begun: not complete (L6)
  return active_.empty() || active_.begin()->first.step > waits_on;
}

void ProgressTracker::DeliverLocked(std::unique_lock<std::mutex>& lock) {
  if (delivering_) return;  // that delivery will pick up what is ready now (L4)
  delivering_ = true;
  while (!pending_.empty() && IsCompleteLocked(pending_.begin()->first)) {
    // Completion is downward closed, so the least pending time is the one to run.
    std::function<void()> callback = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    lock.unlock();
    callback();
    callback = nullptr;  // destroy captures outside the lock too
    lock.lock();
  }
  delivering_ = false;
}

}  // namespace nereid
