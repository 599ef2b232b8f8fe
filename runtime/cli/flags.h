#ifndef NEREID_RUNTIME_CLI_FLAGS_H_
#define NEREID_RUNTIME_CLI_FLAGS_H_

// A subcommand's command line, parsed by CLI11. Each flag is declared once,
// with its help; `nereid COMMAND --help` is generated from the declarations.
// Mistakes come back as one-line errors naming the flag (unknown flags with
// the nearest declared name, a value that is missing or is another flag, a
// switch given something other than true or false).
//
//   Flags flags("nereid plan MODEL -o PLAN [flags]", "Applies compiler passes ...");
//   flags.Value("passes", "P", "the pass pipeline").Value("o,output", "PLAN", "where to write it");
//   flags.Switch("per-rank", "write one plan per rank");
//   RETURN_IF_ERROR(flags.Parse(args));
//   if (flags.Has("per-rank")) ...

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nereid {

class Flags {
 public:
  // `usage` is the help's first line after "Usage: "; `about` says what the
  // command does.
  Flags(std::string usage, std::string about) : usage_(std::move(usage)), about_(std::move(about)) {}

  // A flag that takes a value: `names` is "output" or, with a one-letter
  // alias, "o,output"; `value_name` is how the help shows the value.
  Flags& Value(const std::string& names, const std::string& value_name, const std::string& help);
  // A switch: `--name`, `--name=true` or `--name=false`.
  Flags& Switch(const std::string& name, const std::string& help);
  // The flags declared after this are listed under `title` in the help.
  Flags& Section(const std::string& title);
  // Text printed after the flags (examples, notes).
  Flags& Epilogue(const std::string& text);

  absl::Status Parse(const std::vector<std::string>& args);
  std::string Help() const;

  // Whether the flag was given (a switch: given and true). `name` is the long name.
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string String(const std::string& name, const std::string& fallback = "") const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Declared {
    std::string short_name;  // empty or one letter
    std::string name;
    std::string value_name;  // empty for a switch
    std::string help;
    std::string section;
  };

  const Declared* Find(const std::string& name) const;
  absl::Status UnknownFlag(const std::string& arg) const;

  std::string usage_, about_, epilogue_, section_;
  std::vector<Declared> declared_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_FLAGS_H_
