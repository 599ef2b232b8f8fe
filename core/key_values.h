#ifndef NEREID_CORE_KEY_VALUES_H_
#define NEREID_CORE_KEY_VALUES_H_

// The one syntax of Nereid's key=value lists: "k=v,k=v" (a pass's options,
// the coded attribute) or "k=v;k=v" (codec options in a plan, process
// groups, a checkpoint's run identity). Values may hold '=' but not the
// separator; keys are not empty; empty items are skipped.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// In the order written. An item without '=' or with an empty key is
// InvalidArgument: "<what> 'item' is not key=value".
absl::StatusOr<KeyValues> ParseKeyValues(absl::string_view text, char separator, absl::string_view what);

std::string FormatKeyValues(const KeyValues& items, char separator);

}  // namespace nereid

#endif  // NEREID_CORE_KEY_VALUES_H_
