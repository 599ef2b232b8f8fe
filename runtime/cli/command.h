#ifndef NEREID_RUNTIME_CLI_COMMAND_H_
#define NEREID_RUNTIME_CLI_COMMAND_H_

// A `nereid` subcommand: its name, one-line summary, help text and entry
// point. Adding a subcommand is one new file ending in
//   NEREID_REGISTER_COMMAND(Command{"name", "summary", HelpText, Run});
// (core/registration.h); the binary's BUILD target globs *_command.cc.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/registration.h"

namespace nereid {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the input was bad or the work failed
inline constexpr int kExitUsage = 2;    // the command line was bad

struct Command {
  const char* name;
  const char* summary;
  std::function<std::string()> help;  // the whole help text, built when asked for
  int (*run)(const std::vector<std::string>& args);
};

class CommandRegistry {
 public:
  static CommandRegistry& Global();
  // Fails on a taken or empty name or a missing entry point.
  absl::Status Register(Command command);
  const Command* Find(absl::string_view name) const;
  std::vector<const Command*> All() const;  // by name

 private:
  std::map<std::string, Command, std::less<>> commands_;
};

}  // namespace nereid

#define NEREID_REGISTER_COMMAND(...) NEREID_REGISTER(::nereid::CommandRegistry, __VA_ARGS__)

#endif  // NEREID_RUNTIME_CLI_COMMAND_H_
