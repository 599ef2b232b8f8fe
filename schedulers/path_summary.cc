#include "schedulers/path_summary.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"

namespace nereid {
namespace {

[[noreturn]] void Die(const std::string& message) {
  Log().critical("{}", message);
  std::abort();
}

// a + b into *out; false on overflow.
bool Add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace

absl::StatusOr<PathSummary> PathSummary::Create(int input_depth, int leave, std::vector<int64_t> increments,
                                                std::vector<int64_t> enter) {
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("path summary (input depth ", input_depth, ", leave ", leave,
                                                   ", add (", absl::StrJoin(increments, ", "), "), enter (",
                                                   absl::StrJoin(enter, ", "), ")): ", why));
  };
  if (input_depth < 0) return invalid("input depth must be >= 0");
  if (leave < 0 || leave > input_depth) return invalid("must leave between 0 and input depth loops");
  if (increments.size() != static_cast<size_t>(input_depth - leave)) {
    return invalid("needs one increment per counter kept (input depth - leave)");
  }
  for (int64_t i : increments) {
    if (i < 0) return invalid("increments must be >= 0 (no path goes back in time)");
  }
  for (int64_t e : enter) {
    if (e < 0) return invalid("start values must be >= 0");
  }
  return PathSummary(input_depth, leave, std::move(increments), std::move(enter));
}

PathSummary PathSummary::Identity(int depth) {
  if (depth < 0) Die(absl::StrCat("PathSummary::Identity needs depth >= 0, got ", depth));
  return PathSummary(depth, 0, std::vector<int64_t>(depth, 0), {});
}

PathSummary PathSummary::Feedback(int depth, int scope_index) {
  if (scope_index < 0 || scope_index >= depth) {
    Die(absl::StrCat("PathSummary::Feedback needs 0 <= scope_index < depth, got scope_index ", scope_index,
                     " at depth ", depth));
  }
  std::vector<int64_t> increments(depth, 0);
  increments[scope_index] = 1;
  return PathSummary(depth, 0, std::move(increments), {});
}

PathSummary PathSummary::Enter(int depth) {
  if (depth < 0) Die(absl::StrCat("PathSummary::Enter needs depth >= 0, got ", depth));
  return PathSummary(depth, 0, std::vector<int64_t>(depth, 0), {0});
}

PathSummary PathSummary::Leave(int depth) {
  if (depth < 1) Die(absl::StrCat("PathSummary::Leave needs depth >= 1 (a loop to leave), got ", depth));
  return PathSummary(depth, 1, std::vector<int64_t>(depth - 1, 0), {});
}

std::optional<ScopedTimestamp> PathSummary::ResultsIn(const ScopedTimestamp& t) const {
  if (t.depth() != input_depth_) return std::nullopt;
  ScopedTimestamp out;
  out.epoch = t.epoch;
  out.counters.reserve(output_depth());
  for (size_t i = 0; i < increments_.size(); ++i) {
    int64_t c;
    if (!Add(t.counters[i], increments_[i], &c)) return std::nullopt;
    out.counters.push_back(c);
  }
  out.counters.insert(out.counters.end(), enter_.begin(), enter_.end());
  return out;
}

std::optional<PathSummary> PathSummary::FollowedBy(const PathSummary& next) const {
  if (output_depth() != next.input_depth_) return std::nullopt;
  const int kept = input_depth_ - leave_;  // counters of the input this path keeps
  const int entered = static_cast<int>(enter_.size());
  PathSummary out;
  out.input_depth_ = input_depth_;
  if (next.leave_ <= entered) {
    // `next` leaves only loops this path entered: the input's kept counters
    // take both increments, and the surviving entered loops start later.
    out.leave_ = leave_;
    out.increments_.resize(kept);
    for (int i = 0; i < kept; ++i) {
      if (!Add(increments_[i], next.increments_[i], &out.increments_[i])) return std::nullopt;
    }
    const int survive = entered - next.leave_;
    out.enter_.resize(survive);
    for (int j = 0; j < survive; ++j) {
      if (!Add(enter_[j], next.increments_[kept + j], &out.enter_[j])) return std::nullopt;
    }
  } else {
    // `next` leaves every loop this path entered and some of the input's too.
    const int remaining = next.input_depth_ - next.leave_;  // < kept
    out.leave_ = input_depth_ - remaining;
    out.increments_.resize(remaining);
    for (int i = 0; i < remaining; ++i) {
      if (!Add(increments_[i], next.increments_[i], &out.increments_[i])) return std::nullopt;
    }
  }
  out.enter_.insert(out.enter_.end(), next.enter_.begin(), next.enter_.end());
  return out;
}

bool PathSummary::Advances() const {
  if (output_depth() != input_depth_) return false;
  for (int64_t i : increments_) {
    if (i > 0) return true;
  }
  return false;
}

bool PathSummary::IsIdentity() const { return *this == Identity(input_depth_); }

std::string PathSummary::ToString() const {
  return absl::StrCat("{depth ", input_depth_, " -> ", output_depth(), ": leave ", leave_, ", add (",
                      absl::StrJoin(increments_, ", "), "), enter (", absl::StrJoin(enter_, ", "), ")}");
}

bool LessEqual(const PathSummary& a, const PathSummary& b) {
  if (a.input_depth() != b.input_depth() || a.leave() != b.leave() || a.enter().size() != b.enter().size()) {
    return false;
  }
  for (size_t i = 0; i < a.increments().size(); ++i) {
    if (a.increments()[i] > b.increments()[i]) return false;
  }
  for (size_t j = 0; j < a.enter().size(); ++j) {
    if (a.enter()[j] > b.enter()[j]) return false;
  }
  return true;
}

}  // namespace nereid
