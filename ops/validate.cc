#include "ops/validate.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "graph/placement.h"
#include "graph/process_groups.h"
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
    for (const std::string& n : loop.feedback()) {
      if (graph.FindNode(n)->op() != "Feedback") {
        return absl::InvalidArgumentError(absl::StrCat(graph.source_path(), ": loop scope '", loop.name(),
                                                       "' lists '", n, "' as a feedback, but it is a ",
                                                       graph.FindNode(n)->op(), ", not a Feedback"));
      }
    }
    if (loop.max_in_flight() < 0 || loop.max_in_flight() > 64) {
      return absl::InvalidArgumentError(absl::StrCat(graph.source_path(), ": loop scope '", loop.name(),
                                                     "' has max_in_flight ", loop.max_in_flight(),
                                                     "; it must be in [1, 64] (0: 1)"));
    }
  }
  return absl::OkStatus();
}

// The graph attributes Nereid reads, each with its type; others are kept
// and ignored (a tool's own notes). A wrong type is an error, not a default.
struct GraphAttrSpec {
  const char* name;
  AttrValue::ValueCase type;
  int64_t min = 0;  // ints: the least value
};
constexpr GraphAttrSpec kGraphAttrs[] = {
    {"name", AttrValue::kS},   {"dataset", AttrValue::kS}, {"loss", AttrValue::kS},
    {"logits", AttrValue::kS}, {"num_classes", AttrValue::kI, 1},
};
absl::Status GraphError(const Graph& graph, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(graph.source_path(), ": ", what));
}

// What plans recorded as graph attributes before PlanRecords held them: a
// plan that still carries one was made by an older Nereid and would be
// misread, so it is refused.
constexpr const char* kRetiredPlanAttrs[] = {
    "workers",        "groups",   "strategy",      "compression", "codec_momentum", "gossip", "gossip_overlap",
    "pipeline_width", "lookahead", "servers",      "parameter_server", "data_replicas", "model_parallel", "coded",
    "coded_departures",
};

// "cpu", "cpu:N", "cuda", "cuda:N", "sim", "sim:N" (N a decimal index; sim
// is the simulated device, device/sim_device.cc).
bool IsKnownDevice(absl::string_view device) {
  for (absl::string_view kind : {"cpu", "cuda", "sim"}) {
    if (!absl::ConsumePrefix(&device, kind)) continue;
    if (device.empty()) return true;
    if (!absl::ConsumePrefix(&device, ":") || device.empty() || device.size() > 6) return false;
    return std::all_of(device.begin(), device.end(), [](char c) { return absl::ascii_isdigit(c); });
  }
  return false;
}

// The records' counts are not negative and the pipeline's width is one the
// passes make.
absl::Status CheckPlanRecords(const Graph& graph) {
  const PlanRecords& r = graph.header().records();
  const std::pair<const char*, int64_t> counts[] = {
      {"workers", r.workers()},
      {"model_parallel", r.model_parallel()},
      {"data_replicas", r.data_replicas()},
      {"pipeline_width", r.pipeline_width()},
      {"gossip.overlap", r.gossip().overlap()},
      {"parameter_server.servers", r.parameter_server().servers()},
      {"coded.n", r.coded().n()},
      {"coded.k", r.coded().k()},
      {"placement.device_nodes", r.placement().device_nodes()},
      {"placement.host_nodes", r.placement().host_nodes()},
      {"placement.copies", r.placement().copies()},
      {"placement.fallback_host_nodes", r.placement().fallback_host_nodes()},
  };
  for (const auto& [name, value] : counts) {
    if (value < 0 || value > (1 << 20)) {
      return GraphError(graph, absl::StrCat("the plan's records.", name, " is ", value, "; it must be in 0..", 1 << 20));
    }
  }
  if (!r.placement().device().empty() && !IsKnownDevice(r.placement().device())) {
    return GraphError(graph, absl::StrCat("the plan's records.placement.device is '", r.placement().device(),
                                          "', which Nereid does not know (cpu:N, cuda:N or sim:N)"));
  }
  if (r.pipeline_width() > 64) {
    return GraphError(graph, absl::StrCat("the plan's records.pipeline_width is ", r.pipeline_width(), "; at most 64"));
  }
  return absl::OkStatus();
}

const char* TypeName(AttrValue::ValueCase c) {
  switch (c) {
    case AttrValue::kI:
      return "an integer (i)";
    case AttrValue::kS:
      return "a string (s)";
    default:
      return "another type";
  }
}

// Graph-level attributes: types, bounds, the nodes loss and logits name, the
// groups' syntax; and placement that names ranks or roles the plan lacks.
absl::Status CheckGraphAttrs(const Graph& graph) {
  const auto& attrs = graph.header().attr();
  for (const char* retired : kRetiredPlanAttrs) {
    if (attrs.contains(retired)) {
      return GraphError(graph, absl::StrCat("graph attribute '", retired, "' is how an older Nereid recorded a plan; "
                                            "plan the model again with this version (nereid plan)"));
    }
  }
  RETURN_IF_ERROR(CheckPlanRecords(graph));
  for (const GraphAttrSpec& spec : kGraphAttrs) {
    auto it = attrs.find(spec.name);
    if (it == attrs.end()) continue;
    if (it->second.value_case() != spec.type) {
      return GraphError(graph, absl::StrCat("graph attribute '", spec.name, "' must be ", TypeName(spec.type)));
    }
    if (spec.type == AttrValue::kI && it->second.i() < spec.min) {
      return GraphError(graph, absl::StrCat("graph attribute '", spec.name, "' is ", it->second.i(),
                                            "; it must be at least ", spec.min));
    }
  }
  // A rank's part of a placed plan may hold neither node: another rank does.
  if (!HasPlacedNodes(graph)) {
    for (const char* key : {"loss", "logits"}) {
      auto it = attrs.find(key);
      if (it != attrs.end() && graph.FindNode(it->second.s()) == nullptr) {
        return GraphError(graph, absl::StrCat("graph attribute '", key, "' names node '", it->second.s(),
                                              "', which does not exist"));
      }
    }
  }
  absl::StatusOr<std::vector<GroupDecl>> groups = DeclaredGroups(graph);
  if (!groups.ok()) return GraphError(graph, std::string(groups.status().message()));
  absl::flat_hash_set<std::string> roles;
  for (const GroupDecl& g : *groups) roles.insert(g.name);
  const int64_t workers = graph.header().records().workers();
  for (const Node* node : graph.nodes()) {
    const NodeDef& d = node->def();
    if (!d.device().empty() && !IsKnownDevice(d.device())) {
      return NodeError(graph, *node, absl::StrCat("names device '", d.device(),
                                                  "', which Nereid does not know (cpu, cuda or sim, each with "
                                                  "an optional :N)"));
    }
    if (d.has_worker() && workers > 0 && d.worker() >= workers) {
      return NodeError(graph, *node, absl::StrCat("runs on rank ", d.worker(), " but the plan has ", workers,
                                                  " workers (ranks 0-", workers - 1, ")"));
    }
    if (d.has_worker() && !d.role().empty()) {
      return NodeError(graph, *node, "names both a rank (worker) and a role: one or the other");
    }
    if (!d.role().empty() && !roles.contains(d.role())) {
      return NodeError(graph, *node, absl::StrCat("runs on role '", d.role(),
                                                  "', which the plan's groups do not declare"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGraph(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  if (nodes.empty()) return GraphError(graph, "the graph has no nodes");
  for (const Node* node : nodes) RETURN_IF_ERROR(CheckOpKnown(graph, *node));
  for (const Node* node : nodes) {
    const OpDef& def = *OpRegistry::Global().Find(node->op());
    RETURN_IF_ERROR(CheckInputs(graph, *node, def));
    RETURN_IF_ERROR(CheckAttrs(graph, *node, def));
    RETURN_IF_ERROR(CheckPlacement(graph, *node, def));
  }
  RETURN_IF_ERROR(CheckLoopScopes(graph));
  RETURN_IF_ERROR(CheckGraphAttrs(graph));
  return TopologicalOrder(graph).status();
}

}  // namespace nereid
