// nereid passes: every compiler pass with its options, defaults and ordering
// constraints, and every gradient codec compress() takes, from the registries.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compress/codec.h"
#include "passes/pass_manager.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"

namespace nereid {
namespace {

Flags PassesFlags() {
  return Flags("nereid passes",
               "Lists every pass (for --passes and nereid plan) with its options and defaults, and every\n"
               "gradient codec (compress(method=NAME, key=value...)).");
}

std::string Reference() {
  std::string out = "Passes (--passes 'autodiff,sgd(lr=0.05,momentum=0.9)'):\n";
  for (const std::string& name : PassRegistry::Global().Names()) {
    const PassInfo* p = PassRegistry::Global().Find(name);
    absl::StrAppend(&out, "  ", name, ": ", p->summary, "\n");
    for (const PassOptionSpec& o : p->options) {
      absl::StrAppend(&out, "      ", o.name, " (default ", o.default_value.empty() ? "none" : o.default_value,
                      "): ", o.doc, "\n");
    }
    if (!p->extra_options.empty()) absl::StrAppend(&out, "      ", p->extra_options, "\n");
    if (!p->needs.empty()) absl::StrAppend(&out, "      after what provides ", absl::StrJoin(p->needs, ", "), "\n");
    if (!p->precedes.empty()) {
      absl::StrAppend(&out, "      before what provides ", absl::StrJoin(p->precedes, ", "), "\n");
    }
    if (!p->provides.empty()) absl::StrAppend(&out, "      provides ", absl::StrJoin(p->provides, ", "), "\n");
  }
  absl::StrAppend(&out, "\nGradient codecs (compress(method=NAME, key=value...)):\n");
  for (const std::string& name : CodecRegistry::Global().Names()) {
    const CodecRegistry::Entry* c = CodecRegistry::Global().Find(name);
    absl::StrAppend(&out, "  ", name, ": ", c->summary, "\n");
    for (const auto& [key, doc] : c->options) absl::StrAppend(&out, "      ", key, " ", doc, "\n");
  }
  return out;
}

int Passes(const std::vector<std::string>& args) {
  Flags flags = PassesFlags();
  absl::Status parsed = flags.Parse(args);
  if (parsed.ok() && !flags.positional().empty()) {
    parsed = absl::InvalidArgumentError(absl::StrCat("nereid passes takes no arguments (got '", flags.positional()[0], "')"));
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  std::fputs(Reference().c_str(), stdout);
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"passes", "list the compiler passes and gradient codecs with their options",
                                [] { return PassesFlags().Help(); }, Passes});

}  // namespace nereid
