#include "passes/pass_manager.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/key_values.h"
#include "core/status_macros.h"
#include "ops/collective_schedule.h"
#include "ops/placement_propagation.h"
#include "ops/shape_inference.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

const char* TypeName(OptionType t) {
  switch (t) {
    case OptionType::kFloat:
      return "a number";
    case OptionType::kInt:
      return "an integer";
    case OptionType::kBool:
      return "true or false";
    case OptionType::kString:
      return "a word";
  }
  return "?";
}

bool ValueHasType(const std::string& value, OptionType t) {
  double d;
  int64_t i;
  switch (t) {
    case OptionType::kFloat:
      return absl::SimpleAtod(value, &d);
    case OptionType::kInt:
      return absl::SimpleAtoi(value, &i);
    case OptionType::kBool:
      return value == "true" || value == "false" || value == "1" || value == "0";
    case OptionType::kString:
      return !value.empty();
  }
  return false;
}

std::string OptionList(const PassInfo& info) {
  if (info.options.empty()) return "it takes no options";
  std::vector<std::string> names;
  for (const PassOptionSpec& s : info.options) names.push_back(absl::StrCat(s.name, " (", TypeName(s.type), ")"));
  return absl::StrCat("its options are ", absl::StrJoin(names, ", "));
}

// Splits at commas outside parentheses.
absl::StatusOr<std::vector<std::string>> SplitStages(absl::string_view pipeline) {
  std::vector<std::string> stages;
  std::string current;
  int depth = 0;
  for (char c : pipeline) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) return absl::InvalidArgumentError(absl::StrCat("unbalanced ')' in '", pipeline, "'"));
    if (c == ',' && depth == 0) {
      stages.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) return absl::InvalidArgumentError(absl::StrCat("unclosed '(' in '", pipeline, "'"));
  stages.push_back(current);
  return stages;
}

absl::StatusOr<PipelineStage> ParseStage(absl::string_view written) {
  absl::string_view text = absl::StripAsciiWhitespace(written);
  std::string name(text.substr(0, text.find('(')));
  name = std::string(absl::StripAsciiWhitespace(name));
  if (name.empty()) return absl::InvalidArgumentError("empty pass name in the pipeline");
  const PassInfo* info = PassRegistry::Global().Find(name);
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown pass '", name, "'; passes are: ",
                                                   absl::StrJoin(PassRegistry::Global().Names(), ", ")));
  }
  absl::flat_hash_map<std::string, std::string> values;
  for (const PassOptionSpec& s : info->options) values[s.name] = s.default_value;
  size_t open = text.find('(');
  if (open != absl::string_view::npos) {
    if (text.back() != ')') return absl::InvalidArgumentError(absl::StrCat("pass '", name, "': expected ')' at the end"));
    absl::string_view args = text.substr(open + 1, text.size() - open - 2);
    ASSIGN_OR_RETURN(const KeyValues options, ParseKeyValues(args, ',', absl::StrCat("pass '", name, "': option")));
    for (const auto& [key, value] : options) {
      const PassOptionSpec* spec = nullptr;
      for (const PassOptionSpec& s : info->options) {
        if (s.name == key) spec = &s;
      }
      if (spec == nullptr && info->extra_options.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pass '", name, "' has no option '", key, "'; ", OptionList(*info)));
      }
      if (spec != nullptr && !ValueHasType(value, spec->type)) {
        return absl::InvalidArgumentError(absl::StrCat("pass '", name, "': option ", key, "=", value, " must be ",
                                                       TypeName(spec->type)));
      }
      values[key] = value;
    }
  }
  return PipelineStage{info, PassOptions(std::move(values)), std::string(written)};
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The first stage that provides `property`, or -1.
int FirstProvider(const std::vector<PipelineStage>& pipeline, const std::string& property) {
  for (size_t i = 0; i < pipeline.size(); ++i) {
    if (Contains(pipeline[i].pass->provides, property)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::vector<PipelineStage>> ParsePipeline(absl::string_view pipeline) {
  std::vector<PipelineStage> stages;
  if (absl::StripAsciiWhitespace(pipeline).empty()) return stages;
  ASSIGN_OR_RETURN(std::vector<std::string> texts, SplitStages(pipeline));
  for (const std::string& text : texts) {
    ASSIGN_OR_RETURN(PipelineStage stage, ParseStage(text));
    stages.push_back(std::move(stage));
  }
  RETURN_IF_ERROR(CheckPipelineOrder(stages));
  return stages;
}

absl::Status CheckPipelineOrder(const std::vector<PipelineStage>& pipeline, const Graph* graph) {
  if (graph != nullptr && !pipeline.empty() && GraphHasProperty(*graph, kPlacedProperty)) {
    return absl::FailedPreconditionError(absl::StrCat(
        pipeline[0].pass->name, " cannot run on a placed graph (on ", graph->header().records().placement().device(),
        "): place runs last (plan it again from the model)"));
  }
  for (size_t i = 0; i < pipeline.size(); ++i) {
    const PassInfo& pass = *pipeline[i].pass;
    for (const std::string& property : pass.needs) {
      int provider = FirstProvider(pipeline, property);
      if (provider > static_cast<int>(i)) {
        // The provider in the pipeline first, then every other pass that would do.
        const std::string& other = pipeline[provider].pass->name;
        std::vector<std::string> providers = {other};
        for (const std::string& name : PassRegistry::Global().Names()) {
          if (name != other && Contains(PassRegistry::Global().Find(name)->provides, property)) providers.push_back(name);
        }
        return absl::FailedPreconditionError(absl::StrCat(pass.name, " must come after ", other, " in the pass list (",
                                                          pass.name, " needs ", property, ": run ",
                                                          absl::StrJoin(providers, " or "), " before it)"));
      }
    }
    if (pass.runs_last && i + 1 < pipeline.size()) {
      return absl::FailedPreconditionError(absl::StrCat(pass.name, " must be the last pass in the pass list (",
                                                        pipeline[i + 1].pass->name, " follows it): move it to the end"));
    }
    for (const std::string& property : pass.precedes) {
      int provider = FirstProvider(pipeline, property);
      if (provider >= 0 && provider < static_cast<int>(i)) {
        const std::string& other = pipeline[provider].pass->name;
        return absl::FailedPreconditionError(absl::StrCat(pass.name, " must come before ", other,
                                                          " in the pass list (", other, " provides ", property, ")"));
      }
      if (graph != nullptr && GraphHasProperty(*graph, property)) {
        const std::string state = property == std::string(kOptimizerProperty) ? "has an optimizer"
                                                                               : absl::StrCat("is already ", property);
        return absl::FailedPreconditionError(absl::StrCat(pass.name, " must come before what made the graph so: it ",
                                                          state, " (plan it again from the model)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AddImpliedPasses(std::vector<PipelineStage>& pipeline, const PlanTarget& target) {
  for (const std::string& name : PassRegistry::Global().Names()) {
    const PassInfo* info = PassRegistry::Global().Find(name);
    if (!info->implied_for || !info->implied_for(target)) continue;
    bool provided = false;
    for (const std::string& property : info->provides) provided |= FirstProvider(pipeline, property) >= 0;
    if (provided) continue;
    int after = -1;  // the stage after which everything `info` needs is provided
    for (const std::string& property : info->needs) after = std::max(after, FirstProvider(pipeline, property));
    bool needs_met = true;
    for (const std::string& property : info->needs) needs_met &= FirstProvider(pipeline, property) >= 0;
    if (!needs_met) continue;
    absl::flat_hash_map<std::string, std::string> defaults;
    for (const PassOptionSpec& spec : info->options) defaults[spec.name] = spec.default_value;
    pipeline.insert(pipeline.begin() + (after + 1), PipelineStage{info, PassOptions(std::move(defaults)), info->name});
  }
  return CheckPipelineOrder(pipeline);
}

std::string PipelineText(const std::vector<PipelineStage>& pipeline) {
  std::vector<std::string> texts;
  for (const PipelineStage& stage : pipeline) texts.push_back(stage.text);
  return absl::StrJoin(texts, ",");
}

absl::StatusOr<std::vector<PassReport>> RunPipeline(Graph& graph, const std::vector<PipelineStage>& pipeline,
                                                    const PipelineOptions& options) {
  std::vector<PassReport> reports;
  RETURN_IF_ERROR(CheckPipelineOrder(pipeline, &graph));
  for (const std::string& name : options.dump_after) {
    bool found = false;
    for (const PipelineStage& s : pipeline) found |= s.pass->name == name;
    if (!found) return absl::InvalidArgumentError(absl::StrCat("--dump-after=", name, ": no such pass in the pipeline"));
  }
  // The world the passes partition over: the caller's, else what an earlier
  // plan of this graph recorded (0: not known).
  const PlanTarget target =
      options.target.value_or(PlanTarget{graph.header().records().workers(), -1});
  for (const PipelineStage& stage : pipeline) {
    absl::flat_hash_set<std::string> before;
    for (Node* n : graph.nodes()) before.insert(n->name());
    PassLog log;
    std::unique_ptr<Pass> pass = stage.pass->factory();
    absl::Status status = pass->Run(graph, PassContext{stage.options, target}, &log);
    if (status.ok()) status = ValidateAndInferShapes(graph);
    // The nodes a pass added run where their inputs do (graph/placement.h).
    if (status.ok()) status = PropagatePlacement(graph);
    // Each process group's collectives get their order after every pass, so
    // the graph (and a dump of it) is always complete.
    if (status.ok()) status = AssignCollectiveOrder(graph);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("failed after ", stage.pass->name, ": ", status.message()));
    }
    PassReport report;
    report.pass = stage.pass->name;
    report.options = stage.options.ToString(stage.pass->options);
    absl::flat_hash_set<std::string> after;
    for (Node* n : graph.nodes()) {
      after.insert(n->name());
      if (!before.contains(n->name())) report.added.push_back(n->name());
    }
    for (const std::string& name : before) {
      if (!after.contains(name)) report.removed.push_back(name);
    }
    std::sort(report.removed.begin(), report.removed.end());
    report.notes = std::move(log.notes);
    report.nodes_after = graph.num_nodes();
    reports.push_back(std::move(report));
    for (const std::string& name : options.dump_after) {
      if (name == stage.pass->name && options.dump) RETURN_IF_ERROR(options.dump(name, graph));
    }
  }
  return reports;
}

std::string FormatReport(const PassReport& r) {
  std::string out = absl::StrCat(r.pass, r.options.empty() ? "" : absl::StrCat("(", r.options, ")"), ": +",
                                 r.added.size(), " nodes, -", r.removed.size(), " nodes, ", r.nodes_after, " in all");
  for (const std::string& note : r.notes) absl::StrAppend(&out, "\n  ", note);
  return out;
}

}  // namespace nereid
