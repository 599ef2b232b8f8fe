#include "schedulers/progress_state.h"

#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace nereid {

std::string Pointstamp::ToString() const { return absl::StrCat("(", time.ToString(), ", location ", location, ")"); }

bool PointstampKeyLess::operator()(const Pointstamp& a, const Pointstamp& b) const {
  if (a.location != b.location) return a.location < b.location;
  return ScopedTimestampKeyLess()(a.time, b.time);
}

absl::StatusOr<ProgressState> ProgressState::Create(std::shared_ptr<const Reachability> reachability,
                                                    absl::Span<const ProgressDelta> initial) {
  if (reachability == nullptr) return absl::InvalidArgumentError("progress state: reachability is null");
  ProgressState state(std::move(reachability));
  for (const ProgressDelta& d : initial) {
    if (d.delta <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("progress state: initial pointstamp ",
                                                     Pointstamp{d.time, d.location}.ToString(), " has delta ", d.delta,
                                                     "; initial capabilities are positive"));
    }
  }
  absl::StatusOr<Counts> sums = state.Sum(initial);
  if (!sums.ok()) return sums.status();
  // Nothing is active yet, so the initial capabilities need no justification.
  absl::Status committed = state.Commit(*sums, /*strict=*/false);
  if (!committed.ok()) return committed;
  return state;
}

absl::Status ProgressState::Apply(absl::Span<const ProgressDelta> batch) {
  absl::StatusOr<Counts> sums = Sum(batch);
  if (!sums.ok()) return sums.status();
  return Commit(*sums, /*strict=*/true);
}

absl::Status ProgressState::ApplyRemote(absl::Span<const ProgressDelta> batch) {
  absl::StatusOr<Counts> sums = Sum(batch);
  if (!sums.ok()) return sums.status();
  return Commit(*sums, /*strict=*/false);
}

absl::StatusOr<ProgressState::Counts> ProgressState::Sum(absl::Span<const ProgressDelta> batch) const {
  Counts sums;
  for (const ProgressDelta& d : batch) {
    const Pointstamp p{d.time, d.location};
    auto invalid = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("progress state: pointstamp ", p.ToString(), ": ", why));
    };
    const int depth = reachability_->Depth(d.location);
    if (depth < 0) return invalid("unknown location");
    if (d.time.depth() != depth) {
      return invalid(
          absl::StrCat("the time has ", d.time.depth(), " loop counters but the location lies in ", depth, " loops"));
    }
    bool negative = d.time.epoch < 0;
    for (int64_t c : d.time.counters) negative = negative || c < 0;
    if (negative) return invalid("epoch and counters must be >= 0");
    if (d.delta == 0) continue;
    int64_t& sum = sums[p];
    if (__builtin_add_overflow(sum, d.delta, &sum)) return invalid("deltas overflow int64");
  }
  for (auto it = sums.begin(); it != sums.end();) {
    it = it->second == 0 ? sums.erase(it) : std::next(it);
  }
  return sums;
}

absl::Status ProgressState::Commit(const Counts& sums, bool strict) {
  // Everything is judged against the state before the batch (BatchesAreAtomic).
  std::vector<std::pair<const Pointstamp*, int64_t>> updates;  // (pointstamp, new count)
  updates.reserve(sums.size());
  for (const auto& [p, delta] : sums) {
    const int64_t count = Count(p.time, p.location);
    int64_t updated;
    if (__builtin_add_overflow(count, delta, &updated)) {
      return absl::InvalidArgumentError(absl::StrCat("progress state: pointstamp ", p.ToString(), ": count ", count,
                                                     " + ", delta, " overflows int64"));
    }
    if (strict && updated < 0) {
      return absl::FailedPreconditionError(absl::StrCat("progress state: pointstamp ", p.ToString(), ": count ", count,
                                                        " with delta ", delta, " would be negative (", updated,
                                                        "): retired more often than created"));
    }
    if (strict && delta > 0 && !CouldArrive(p)) {
      return absl::FailedPreconditionError(
          absl::StrCat("progress state: pointstamp ", p.ToString(),
                       ": created, but no active pointstamp could result in it (work appears only where existing "
                       "work could result in it, or the frontier would move back)"));
    }
    updates.emplace_back(&p, updated);
  }
  // Nothing below can fail.
  for (const auto& [p, updated] : updates) {
    if (updated == 0) {
      counts_.erase(*p);
    } else {
      counts_[*p] = updated;
    }
  }
  return absl::OkStatus();
}

Antichain<ScopedTimestamp> ProgressState::Frontier(int location) const {
  Antichain<ScopedTimestamp> frontier;
  for (const auto& [q, count] : counts_) {
    if (count <= 0) continue;
    if (q.location == location) frontier.Insert(q.time);
    for (const PathSummary& s : reachability_->Summaries(q.location, location).elements()) {
      if (std::optional<ScopedTimestamp> t = s.ResultsIn(q.time)) frontier.Insert(*std::move(t));
    }
  }
  return frontier;
}

bool ProgressState::IsComplete(const ScopedTimestamp& t, int location) const {
  return !CouldArrive(Pointstamp{t, location});
}

bool ProgressState::CouldArrive(const Pointstamp& p) const {
  for (const auto& [q, count] : counts_) {
    if (count > 0 && reachability_->CouldResultIn(q.time, q.location, p.time, p.location)) return true;
  }
  return false;
}

int64_t ProgressState::Count(const ScopedTimestamp& t, int location) const {
  auto it = counts_.find(Pointstamp{t, location});
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace nereid
