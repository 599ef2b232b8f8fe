#ifndef NEREID_RUNTIME_CLI_COMMAND_H_
#define NEREID_RUNTIME_CLI_COMMAND_H_

// A `nereid` subcommand: its name, one-line summary, help text and entry
// point. Adding a subcommand is one new file plus one line in main.cc.

#include <string>
#include <vector>

namespace nereid {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the input was bad or the work failed
inline constexpr int kExitUsage = 2;    // the command line was bad

struct Command {
  const char* name;
  const char* summary;
  const char* help;
  int (*run)(const std::vector<std::string>& args);
};

const Command& BenchCommand();
const Command& CheckCommand();
const Command& ModelCommand();
const Command& OpsCommand();
const Command& PlanCommand();
const Command& RunCommand();

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_COMMAND_H_
