#include "ops/collective_schedule.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/status_macros.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"

namespace nereid {
namespace {

int64_t IntAttrOr(const Node& node, const char* name, int64_t otherwise) {
  auto it = node.def().attr().find(name);
  return it == node.def().attr().end() ? otherwise : it->second.i();
}

// Nodes evaluation runs: ancestors of the graph's logits and loss, not
// through a Parameter's `next` input (evaluation reads current values).
absl::flat_hash_set<const Node*> EvaluatedNodes(const std::vector<Node*>& order, const Graph& graph) {
  absl::flat_hash_set<const Node*> needed;
  for (const char* attr : {"logits", "loss"}) {
    if (Node* n = graph.FindNode(GraphAttr(graph, attr))) needed.insert(n);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node* n = *it;
    if (!needed.contains(n) || n->op() == "Parameter") continue;
    for (int i = 0; i < n->num_inputs(); ++i) needed.insert(n->input_edge(i)->src);
    for (const Edge* e : n->control_inputs()) needed.insert(e->src);
  }
  return needed;
}

}  // namespace

std::string CollectiveGroup(const Node& node) {
  auto it = node.def().attr().find("group");
  return it == node.def().attr().end() ? "" : it->second.s();
}

bool IsCollective(const Node& node) {
  const OpDef* def = OpRegistry::Global().Find(node.op());
  return def != nullptr && def->collective;
}

absl::Status AssignCollectiveOrder(Graph& graph) {
  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
  absl::flat_hash_set<const Node*> evaluated = EvaluatedNodes(order, graph);
  absl::flat_hash_map<std::string, int> next, next_eval;
  for (Node* n : order) {
    if (!IsCollective(*n)) continue;
    std::string group = CollectiveGroup(*n);
    if (group.empty()) continue;  // the world's buckets are the data-parallel pass's
    auto& attrs = *n->mutable_def()->mutable_attr();
    attrs["bucket"] = IntAttr(next[group]++);
    if (OpRegistry::Global().Find(n->op())->FindAttr("eval_bucket") != nullptr) {
      attrs["eval_bucket"] = IntAttr(evaluated.contains(n) ? next_eval[group]++ : -1);
    }
  }
  return absl::OkStatus();
}

absl::flat_hash_map<std::string, CollectiveCounts> CollectivesByGroup(const Graph& graph) {
  absl::flat_hash_map<std::string, CollectiveCounts> counts;
  for (Node* n : graph.nodes()) {
    if (!IsCollective(*n)) continue;
    CollectiveCounts& c = counts[CollectiveGroup(*n)];
    ++c.per_step;
    if (IntAttrOr(*n, "eval_bucket", -1) >= 0) ++c.per_evaluation;
  }
  return counts;
}

}  // namespace nereid
