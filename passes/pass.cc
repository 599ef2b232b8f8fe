#include "passes/pass.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace nereid {

double PassOptions::GetFloat(absl::string_view name) const {
  double v = 0;
  auto it = values_.find(name);
  if (it != values_.end()) (void)absl::SimpleAtod(it->second, &v);
  return v;
}

int64_t PassOptions::GetInt(absl::string_view name) const {
  int64_t v = 0;
  auto it = values_.find(name);
  if (it != values_.end()) (void)absl::SimpleAtoi(it->second, &v);
  return v;
}

bool PassOptions::GetBool(absl::string_view name) const {
  auto it = values_.find(name);
  return it != values_.end() && (it->second == "true" || it->second == "1");
}

const std::string& PassOptions::GetString(absl::string_view name) const {
  static const std::string kEmpty;
  auto it = values_.find(name);
  return it == values_.end() ? kEmpty : it->second;
}

std::string PassOptions::ToString(const std::vector<PassOptionSpec>& specs) const {
  std::string out;
  for (const PassOptionSpec& s : specs) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", s.name, "=", GetString(s.name));
  }
  for (const auto& [key, value] : Undeclared(specs)) absl::StrAppend(&out, out.empty() ? "" : ", ", key, "=", value);
  return out;
}

std::vector<std::pair<std::string, std::string>> PassOptions::Undeclared(
    const std::vector<PassOptionSpec>& specs) const {
  std::vector<std::pair<std::string, std::string>> extra;
  for (const auto& [key, value] : values_) {
    bool declared = false;
    for (const PassOptionSpec& s : specs) declared |= s.name == key;
    if (!declared) extra.emplace_back(key, value);
  }
  std::sort(extra.begin(), extra.end());
  return extra;
}

PassRegistry& PassRegistry::Global() {
  static PassRegistry* registry = new PassRegistry();
  return *registry;
}

absl::Status PassRegistry::Register(PassInfo info) {
  if (passes_.contains(info.name)) return absl::AlreadyExistsError(absl::StrCat("pass '", info.name, "' registered twice"));
  std::string name = info.name;
  passes_.emplace(std::move(name), std::move(info));
  return absl::OkStatus();
}

const PassInfo* PassRegistry::Find(absl::string_view name) const {
  auto it = passes_.find(name);
  return it == passes_.end() ? nullptr : &it->second;
}

std::vector<std::string> PassRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, info] : passes_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace nereid
