#include "schedulers/scoped_timestamp.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {

std::string ScopedTimestamp::ToString() const {
  if (counters.empty()) return absl::StrCat("(", epoch, ")");
  return absl::StrCat("(", epoch, "; ", absl::StrJoin(counters, ", "), ")");
}

bool LessEqual(const ScopedTimestamp& a, const ScopedTimestamp& b) {
  if (a.counters.size() != b.counters.size() || a.epoch > b.epoch) return false;
  for (size_t i = 0; i < a.counters.size(); ++i) {
    if (a.counters[i] > b.counters[i]) return false;
  }
  return true;
}

bool ScopedTimestampKeyLess::operator()(const ScopedTimestamp& a, const ScopedTimestamp& b) const {
  return std::forward_as_tuple(a.epoch, a.counters.size(), a.counters) <
         std::forward_as_tuple(b.epoch, b.counters.size(), b.counters);
}

}  // namespace nereid
