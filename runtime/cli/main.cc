// nereid: the command-line entry point. Dispatches to subcommands.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/build_revision.h"
#include "core/logging.h"
#include "core/version.h"
#include "runtime/cli/command.h"

namespace nereid {
namespace {

std::vector<const Command*> Commands() { return CommandRegistry::Global().All(); }

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "nereid: a dataflow-graph engine for distributed deep-net training.\n\n"
               "Usage: nereid COMMAND [options]\n\nCommands:\n");
  for (const Command* c : Commands()) std::fprintf(out, "  %-8s %s\n", c->name, c->summary);
  std::fprintf(out,
               "\nRun 'nereid COMMAND --help' for a command's options; 'nereid --version' for the version.\n");
}

}  // namespace
}  // namespace nereid

// oneDNN runs on libgomp, whose idle threads spin by default; on a worker
// whose cores the executor hands out, spinning threads steal them from the
// node tasks (measured: 2.8x slower mlp steps on 2 cores). libgomp reads its
// settings when it loads, before main, so set them and re-execute once.
void UsePassiveOpenMpThreads(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // on failure, carry on with spinning threads
}

int main(int argc, char** argv) {
  using nereid::Commands;
  UsePassiveOpenMpThreads(argv);
  if (argc < 2) {
    nereid::PrintUsage(stderr);
    return nereid::kExitUsage;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    nereid::PrintUsage(stdout);
    return nereid::kExitOk;
  }
  if (name == "--version" || name == "version") {
    std::printf("nereid %s (revision %s)\n", kNereidVersion, NereidRevision());
    return nereid::kExitOk;
  }
  for (const nereid::Command* c : Commands()) {
    if (name != c->name) continue;
    std::vector<std::string> args(argv + 2, argv + argc);
    for (const std::string& a : args) {
      if (a == "--help" || a == "-h") {
        std::printf("%s", c->help().c_str());
        return nereid::kExitOk;
      }
    }
    // NEREID_LOG_LEVEL for every command (nereid run's --log-level overrides it).
    if (absl::Status s = nereid::ConfigureLogging("", -1); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return nereid::kExitUsage;
    }
    return c->run(args);
  }
  std::fprintf(stderr, "nereid: unknown command '%s'\n\n", name.c_str());
  nereid::PrintUsage(stderr);
  return nereid::kExitUsage;
}
