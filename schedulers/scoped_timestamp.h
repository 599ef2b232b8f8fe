#ifndef NEREID_SCHEDULERS_SCOPED_TIMESTAMP_H_
#define NEREID_SCHEDULERS_SCOPED_TIMESTAMP_H_

// ScopedTimestamp: the logical time of the general progress model (Naiad's
// timestamps). A value at a location nested inside k loop scopes carries an
// epoch and k loop counters, outermost first: (e; c1, ..., ck). Nereid's
// training loop is the outermost scope, so its counter is the step; a gossip
// round inside a step is a second counter. The epoch is the time of the input
// and no path summary changes it. Timestamps are ordered as a product:
// a <= b iff they have the same depth, a.epoch <= b.epoch and every counter of
// a is <= the same counter of b. So (0; 1, 5) and (0; 2, 0) are incomparable:
// round 5 of step 1 neither precedes nor follows round 0 of step 2, and a
// frontier is in general an antichain (antichain.h), not one time. With one
// counter and steps that never go back when the epoch advances (timestamp.h),
// the product order agrees with the single-loop tracker's lexicographic order on
// every timestamp a run produces.
//
// Laws (scoped_timestamp_test.cc tests each under its name):
//   LessEqualIsReflexive      a <= a.
//   LessEqualIsAntisymmetric  a <= b and b <= a imply a == b.
//   LessEqualIsTransitive     a <= b and b <= c imply a <= c.
//   DepthsDoNotCompare        timestamps of different depths are incomparable
//                             (both a <= b and b <= a are false).
//   ProductOrder              a <= b iff epoch and every counter are <=; two
//                             timestamps of one depth may be incomparable.
// ToString is "(e; c1, c2)", and "(e)" at depth 0.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace nereid {

struct ScopedTimestamp {
  int64_t epoch = 0;
  std::vector<int64_t> counters;  // one per enclosing loop scope, outermost first

  int depth() const { return static_cast<int>(counters.size()); }
  std::string ToString() const;
};

// The product partial order; false across depths.
bool LessEqual(const ScopedTimestamp& a, const ScopedTimestamp& b);

inline bool operator==(const ScopedTimestamp& a, const ScopedTimestamp& b) {
  return a.epoch == b.epoch && a.counters == b.counters;
}
inline bool operator!=(const ScopedTimestamp& a, const ScopedTimestamp& b) { return !(a == b); }

inline std::ostream& operator<<(std::ostream& os, const ScopedTimestamp& t) { return os << t.ToString(); }

// A total order for use as a container key only (epoch, then depth, then
// counters lexicographically); it is not the progress order.
struct ScopedTimestampKeyLess {
  bool operator()(const ScopedTimestamp& a, const ScopedTimestamp& b) const;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_SCOPED_TIMESTAMP_H_
