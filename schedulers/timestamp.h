#ifndef NEREID_SCHEDULERS_TIMESTAMP_H_
#define NEREID_SCHEDULERS_TIMESTAMP_H_

// The logical time every value in Nereid's training loop carries: (epoch, step),
// where `step` is the global iteration counter (it keeps counting across
// epochs, so it alone already orders the loop's iterations; the epoch rides
// along for data loading and reporting). Timestamps are ordered
// lexicographically by (epoch, step). A Feedback vertex carries a value from
// step t to step t+1.
//
// Because steps never go back when the epoch advances, the lexicographic order
// and the order by step agree on every timestamp a well-formed run produces;
// the progress tracker relies on that (and checks it where steps begin).

#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace nereid {

struct Timestamp {
  int64_t epoch = 0;
  int64_t step = 0;

  // "(e, s)".
  std::string ToString() const { return absl::StrCat("(", epoch, ", ", step, ")"); }
};

inline bool operator==(const Timestamp& a, const Timestamp& b) { return a.epoch == b.epoch && a.step == b.step; }
inline bool operator!=(const Timestamp& a, const Timestamp& b) { return !(a == b); }
inline bool operator<(const Timestamp& a, const Timestamp& b) {
  return std::tie(a.epoch, a.step) < std::tie(b.epoch, b.step);
}
inline bool operator>(const Timestamp& a, const Timestamp& b) { return b < a; }
inline bool operator<=(const Timestamp& a, const Timestamp& b) { return !(b < a); }
inline bool operator>=(const Timestamp& a, const Timestamp& b) { return !(a < b); }

inline std::ostream& operator<<(std::ostream& os, const Timestamp& t) { return os << t.ToString(); }

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_TIMESTAMP_H_
