#include "core/key_values.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace nereid {

absl::StatusOr<KeyValues> ParseKeyValues(absl::string_view text, char separator, absl::string_view what) {
  KeyValues items;
  for (absl::string_view item : absl::StrSplit(text, separator, absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", item, "' is not key=value"));
    }
    items.emplace_back(std::string(absl::StripAsciiWhitespace(item.substr(0, eq))),
                       std::string(absl::StripAsciiWhitespace(item.substr(eq + 1))));
  }
  return items;
}

std::string FormatKeyValues(const KeyValues& items, char separator) {
  std::string out;
  for (const auto& [key, value] : items) {
    if (!out.empty()) out.push_back(separator);
    absl::StrAppend(&out, key, "=", value);
  }
  return out;
}

}  // namespace nereid
