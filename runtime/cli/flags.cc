#include "runtime/cli/flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace nereid {

namespace {

// Levenshtein distance, for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool IsNumber(const std::string& s) {
  double d;
  return absl::SimpleAtod(s, &d);
}

}  // namespace

absl::Status Flags::Parse(const std::vector<std::string>& args) {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() >= 2 && a[0] == '-' && a[1] != '-' && !IsNumber(a)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a, ": flags start with -- (--", a.substr(1),
                                                     "?)"));
    }
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
      // --quiet, --quiet=true, --quiet=false.
      if (inline_value && value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": a switch is true or false"));
      }
      if (inline_value && value == "false") {
        values_.erase(name);
      } else {
        values_[name] = "true";
      }
    } else if (contains(value_flags_, name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        // A flag where the value should be: the value was forgotten.
        if (args[i + 1].compare(0, 2, "--") == 0) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value (got the flag ", args[i + 1], ")"));
        }
        value = args[++i];
      }
      values_[name] = value;
    } else {
      std::vector<std::string> all = value_flags_;
      all.insert(all.end(), bool_flags_.begin(), bool_flags_.end());
      std::string nearest;
      size_t best = 3;  // suggest only close names
      for (const std::string& f : all) {
        const size_t d = EditDistance(name, f);
        if (d < best) {
          best = d;
          nearest = f;
        }
      }
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name,
                                                     nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest,
                                                                                         "?)"),
                                                     "; flags are --", absl::StrJoin(all, ", --")));
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
