#ifndef NEREID_SCHEDULERS_PATH_SUMMARY_H_
#define NEREID_SCHEDULERS_PATH_SUMMARY_H_

// PathSummary: what a path through the dataflow graph does to a timestamp
// (Naiad's path summaries, timely's PathSummary). Every path between two
// locations changes a timestamp of the source's depth in three moves, in this
// order: it drops the `leave` innermost counters (the loops it leaves), adds
// `increments` to the counters that remain (a Feedback adds 1 to its scope's
// counter), and appends new innermost counters starting at `enter` (the loops
// it enters, normally at 0). The epoch is never changed. Summaries compose
// (FollowedBy) into the summary of the concatenated path, and are ordered
// coordinate-wise within one shape (same input depth, same leave, same number
// of loops entered), so the summaries between two locations form an antichain
// of minimal ones. Increments and start values are >= 0: no path goes back in
// time.
//
// Laws (path_summary_test.cc tests each under its name):
//   IdentityIsNeutral          Identity(d) followed by s, and s followed by
//                              Identity(d'), is s; ResultsIn(Identity(d), t) is t.
//   CompositionIsAssociative   (a.b).c == a.(b.c), both defined or neither.
//   CompositionIsSequencing    where FollowedBy(a, b) is defined,
//                              ResultsIn(FollowedBy(a, b), t) == ResultsIn(b, ResultsIn(a, t)).
//   ResultsAreMonotone         t1 <= t2 implies ResultsIn(s, t1) <= ResultsIn(s, t2)
//                              (where the latter is defined).
//   SmallerSummariesGiveSmallerResults
//                              a <= b implies ResultsIn(a, t) <= ResultsIn(b, t)
//                              (where the latter is defined; then so is the former).
//   FeedbackStrictlyAdvances   Feedback(d, i) adds 1 to counter i; any summary
//                              that keeps a counter and adds > 0 to it (Advances())
//                              results in a time never <= its input, so no cycle
//                              through a Feedback has an identity summary.
// ResultsIn is nullopt when the timestamp's depth is not the input depth or a
// counter would overflow int64; FollowedBy is nullopt when a's output depth is
// not b's input depth or a sum would overflow.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {

class PathSummary {
 public:
  // The summary of the empty path at depth 0.
  PathSummary() = default;

  // Validated construction from parts that come from input: InvalidArgument
  // unless 0 <= leave <= input_depth, increments.size() == input_depth - leave
  // and every increment and start value is >= 0.
  static absl::StatusOr<PathSummary> Create(int input_depth, int leave, std::vector<int64_t> increments,
                                            std::vector<int64_t> enter);

  // Factories for the graph's edges. Their arguments are constants of the
  // caller's graph, so a bad one is a programming error: they abort with a
  // message (use Create for input).
  static PathSummary Identity(int depth);                   // changes nothing
  static PathSummary Feedback(int depth, int scope_index);  // +1 on counter scope_index (0 = outermost)
  static PathSummary Enter(int depth);                      // depth -> depth + 1, the new counter at 0
  static PathSummary Leave(int depth);                      // depth -> depth - 1 (depth >= 1)

  int input_depth() const { return input_depth_; }
  int output_depth() const { return input_depth_ - leave_ + static_cast<int>(enter_.size()); }
  int leave() const { return leave_; }
  const std::vector<int64_t>& increments() const { return increments_; }
  const std::vector<int64_t>& enter() const { return enter_; }

  // The timestamp after the path; nullopt when t's depth is not input_depth()
  // or a counter overflows.
  std::optional<ScopedTimestamp> ResultsIn(const ScopedTimestamp& t) const;

  // The summary of this path followed by `next`; nullopt when output_depth()
  // != next.input_depth() or a sum overflows.
  std::optional<PathSummary> FollowedBy(const PathSummary& next) const;

  // A cycle's summary (input depth == output depth) that keeps some counter
  // and adds > 0 to it: its results are never <= its inputs.
  bool Advances() const;

  // Identity(input_depth()).
  bool IsIdentity() const;

  // "{depth 2 -> 2: leave 1, add (1), enter (0)}".
  std::string ToString() const;

  friend bool operator==(const PathSummary& a, const PathSummary& b) {
    return a.input_depth_ == b.input_depth_ && a.leave_ == b.leave_ && a.increments_ == b.increments_ &&
           a.enter_ == b.enter_;
  }
  friend bool operator!=(const PathSummary& a, const PathSummary& b) { return !(a == b); }

 private:
  PathSummary(int input_depth, int leave, std::vector<int64_t> increments, std::vector<int64_t> enter)
      : input_depth_(input_depth), leave_(leave), increments_(std::move(increments)), enter_(std::move(enter)) {}

  int input_depth_ = 0;
  int leave_ = 0;
  std::vector<int64_t> increments_;  // input_depth_ - leave_ of them, each >= 0
  std::vector<int64_t> enter_;       // start values of the loops entered, each >= 0
};

// The partial order on summaries: same shape (input depth, leave, loops
// entered) and every increment and start value <=.
bool LessEqual(const PathSummary& a, const PathSummary& b);

inline std::ostream& operator<<(std::ostream& os, const PathSummary& s) { return os << s.ToString(); }

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_PATH_SUMMARY_H_
