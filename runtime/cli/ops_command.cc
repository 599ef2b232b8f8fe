// nereid ops [OP]: lists the registered ops, or one op's signature.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/op_registry.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"

namespace nereid {
namespace {

Flags OpsFlags() {
  return Flags("nereid ops [OP...]",
               "Without OP, lists every registered op with its summary. With OP, prints\n"
               "its inputs, outputs and attributes (type, default).");
}

std::string DefaultText(const AttrSpec& a) {
  if (!a.default_value) return "required";
  const AttrValue& v = *a.default_value;
  switch (v.value_case()) {
    case AttrValue::kI: return absl::StrCat("= ", v.i());
    case AttrValue::kF: return absl::StrCat("= ", v.f());
    case AttrValue::kS: return absl::StrCat("= \"", v.s(), "\"");
    case AttrValue::kB: return v.b() ? "= true" : "= false";
    case AttrValue::kType: return absl::StrCat("= ", DataTypeName(v.type()));
    case AttrValue::kList: return absl::StrCat("= [", absl::StrJoin(v.list().i(), ","), "]");
    case AttrValue::kTensor:
      return v.tensor().has_init() ? absl::StrCat("= init ", v.tensor().init().kind()) : "= tensor";
    default: return "";
  }
}

int RunOps(const std::vector<std::string>& command_line) {
  Flags flags = OpsFlags();
  if (absl::Status parsed = flags.Parse(command_line); !parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  const std::vector<std::string>& args = flags.positional();
  const OpRegistry& registry = OpRegistry::Global();
  if (args.empty()) {
    for (const std::string& name : registry.OpNames()) {
      std::printf("%-20s %s\n", name.c_str(), registry.Find(name)->summary.c_str());
    }
    return kExitOk;
  }
  int status = kExitOk;
  for (const std::string& name : args) {
    const OpDef* def = registry.Find(name);
    if (def == nullptr) {
      std::fprintf(stderr, "error: unknown op '%s'\n", name.c_str());
      status = kExitFailure;
      continue;
    }
    std::printf("%s%s -> (%s)\n  %s\n", def->name.c_str(), def->InputSignature().c_str(),
                (absl::StrJoin(def->outputs, ", ") + (def->output_per_input ? "..." : "")).c_str(), def->summary.c_str());
    for (const AttrSpec& a : def->attrs) {
      std::string allowed =
          a.allowed_strings.empty() ? "" : absl::StrCat(" (one of ", absl::StrJoin(a.allowed_strings, ", "), ")");
      std::printf("  attr %-12s %-12s %s%s%s\n", a.name.c_str(), AttrTypeName(a.type).c_str(),
                  DefaultText(a).c_str(), allowed.c_str(), a.doc.empty() ? "" : ("  # " + a.doc).c_str());
    }
  }
  return status;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"ops", "list the registered ops and their signatures", [] { return OpsFlags().Help(); }, RunOps});

}  // namespace nereid
