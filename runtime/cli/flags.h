#ifndef NEREID_RUNTIME_CLI_FLAGS_H_
#define NEREID_RUNTIME_CLI_FLAGS_H_

// A small command-line parser for subcommands: `--name value`,
// `--name=value`, boolean `--name`, and positional arguments. Unknown flags
// and malformed values are errors that name the flag.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nereid {

class Flags {
 public:
  // `value_flags` take a value; `bool_flags` do not.
  Flags(std::vector<std::string> value_flags, std::vector<std::string> bool_flags)
      : value_flags_(std::move(value_flags)), bool_flags_(std::move(bool_flags)) {}

  absl::Status Parse(const std::vector<std::string>& args);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string String(const std::string& name, const std::string& fallback = "") const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::vector<std::string> value_flags_, bool_flags_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_FLAGS_H_
