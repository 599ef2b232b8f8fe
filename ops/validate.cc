#include "ops/validate.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"

namespace nereid {
namespace {

// Levenshtein distance, to suggest the op or attribute a person meant.
int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int subst = prev[j - 1] + (absl::ascii_tolower(a[i - 1]) != absl::ascii_tolower(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string Suggest(absl::string_view wrong, const std::vector<std::string>& options) {
  std::string best;
  int best_distance = 3;
  for (const std::string& o : options) {
    int d = EditDistance(wrong, o);
    if (d < best_distance) {
      best_distance = d;
      best = o;
    }
  }
  return best.empty() ? "" : absl::StrCat("; did you mean '", best, "'?");
}

absl::Status CheckOpKnown(const Graph& graph, const Node& node) {
  if (OpRegistry::Global().Find(node.op()) != nullptr) return absl::OkStatus();
  if (node.op().empty()) return NodeError(graph, node, "node has no op");
  std::vector<std::string> names = OpRegistry::Global().OpNames();
  std::string hint = Suggest(node.op(), names);
  return NodeError(graph, node,
                   absl::StrCat("unknown op '", node.op(), "'",
                                hint.empty() ? absl::StrCat(" (known ops: ", absl::StrJoin(names, ", "), ")") : hint));
}

absl::Status CheckInputs(const Graph& graph, const Node& node, const OpDef& def) {
  int n = node.num_inputs(), lo = def.MinInputs(), hi = def.MaxInputs();
  if (n < lo || (hi >= 0 && n > hi)) {
    std::string expected = hi < 0 ? absl::StrCat("at least ", lo) : lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, " to ", hi);
    return NodeError(graph, node, absl::StrCat(def.name, " takes ", expected, " input(s) ", def.InputSignature(),
                                               ", got ", n));
  }
  for (int p = 0; p < n; ++p) {
    const Edge* e = node.input_edge(p);
    if (e == nullptr) return NodeError(graph, node, absl::StrCat("input ", p, " is not connected"));
    const OpDef* src = OpRegistry::Global().Find(e->src->op());
    int outputs = src->NumOutputs(e->src->num_inputs());
    if (e->src_port >= outputs) {
      return NodeError(graph, node,
                       absl::StrCat("input ", p, " names output ", e->src_port, " of node '", e->src->name(),
                                    "', but ", src->name, " has ", outputs, " output(s)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAttrs(const Graph& graph, const Node& node, const OpDef& def) {
  // Sorted so the first error reported does not depend on map order.
  std::vector<std::string> given;
  for (const auto& [name, value] : node.def().attr()) given.push_back(name);
  std::sort(given.begin(), given.end());
  for (const std::string& name : given) {
    const AttrValue& value = node.def().attr().at(name);
    const AttrSpec* spec = def.FindAttr(name);
    if (spec == nullptr) {
      std::vector<std::string> known;
      for (const AttrSpec& a : def.attrs) known.push_back(a.name);
      std::string hint = Suggest(name, known);
      return NodeError(graph, node,
                       absl::StrCat("unknown attribute '", name, "'", hint,
                                    known.empty() ? absl::StrCat(" (", def.name, " has no attributes)")
                                                  : absl::StrCat(" (", def.name, " has: ", absl::StrJoin(known, ", "), ")")));
    }
    if (!AttrValueHasType(value, spec->type)) {
      return NodeError(graph, node,
                       absl::StrCat("attribute '", name, "' must be ", AttrTypeName(spec->type), ", got ",
                                    DescribeAttrValueType(value)));
    }
    if (!spec->allowed_strings.empty() &&
        std::find(spec->allowed_strings.begin(), spec->allowed_strings.end(), value.s()) ==
            spec->allowed_strings.end()) {
      return NodeError(graph, node,
                       absl::StrCat("attribute '", name, "' is \"", value.s(), "\"; allowed: ",
                                    absl::StrJoin(spec->allowed_strings, ", ")));
    }
  }
  for (const AttrSpec& spec : def.attrs) {
    if (!spec.default_value && !node.def().attr().contains(spec.name)) {
      return NodeError(graph, node,
                       absl::StrCat("missing required attribute '", spec.name, "' (", AttrTypeName(spec.type),
                                    spec.doc.empty() ? "" : absl::StrCat(": ", spec.doc), ")"));
    }
  }
  return absl::OkStatus();
}

bool LoopDeclared(const Graph& graph, const std::string& name) {
  for (const LoopScope& loop : graph.header().loop()) {
    if (loop.name() == name) return true;
  }
  return false;
}

absl::Status CheckPlacement(const Graph& graph, const Node& node, const OpDef& def) {
  const NodeDef& d = node.def();
  if (d.has_worker() && d.worker() < 0) {
    return NodeError(graph, node, absl::StrCat("worker ", d.worker(), " is negative"));
  }
  if (d.has_stage() && d.stage() < 0) {
    return NodeError(graph, node, absl::StrCat("stage ", d.stage(), " is negative"));
  }
  std::string loop = d.loop();
  if (def.closes_cycles) loop = d.attr().at("loop").s();  // present: CheckAttrs ran first
  if (!loop.empty() && !LoopDeclared(graph, loop)) {
    return NodeError(graph, node, absl::StrCat("loop scope '", loop, "' is not declared in the graph's loop list"));
  }
  return absl::OkStatus();
}

absl::Status CheckLoopScopes(const Graph& graph) {
  absl::flat_hash_set<std::string> names;
  for (const LoopScope& loop : graph.header().loop()) {
    if (loop.name().empty() || !names.insert(loop.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(graph.source_path(), ": loop scope '", loop.name(),
                                                     "' is unnamed or declared twice"));
    }
    for (const auto* list : {&loop.ingress(), &loop.feedback(), &loop.egress()}) {
      for (const std::string& n : *list) {
        if (graph.FindNode(n) == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(graph.source_path(), ": loop scope '", loop.name(),
                                                         "' names node '", n, "', which does not exist"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGraph(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  for (const Node* node : nodes) RETURN_IF_ERROR(CheckOpKnown(graph, *node));
  for (const Node* node : nodes) {
    const OpDef& def = *OpRegistry::Global().Find(node->op());
    RETURN_IF_ERROR(CheckInputs(graph, *node, def));
    RETURN_IF_ERROR(CheckAttrs(graph, *node, def));
    RETURN_IF_ERROR(CheckPlacement(graph, *node, def));
  }
  RETURN_IF_ERROR(CheckLoopScopes(graph));
  return TopologicalOrder(graph).status();
}

}  // namespace nereid
