#include "runtime/cli/flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace nereid {

absl::Status Flags::Parse(const std::vector<std::string>& args) {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    size_t eq = name.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (contains(bool_flags_, name)) {
      values_[name] = inline_value ? value : "true";
    } else if (contains(value_flags_, name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        value = args[++i];
      }
      values_[name] = value;
    } else {
      std::vector<std::string> all = value_flags_;
      all.insert(all.end(), bool_flags_.begin(), bool_flags_.end());
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, "; flags are --", absl::StrJoin(all, ", --")));
    }
  }
  return absl::OkStatus();
}

std::string Flags::String(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> Flags::Int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", it->second, " is not an integer"));
  }
  return v;
}

}  // namespace nereid
