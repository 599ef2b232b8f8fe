#include "ops/collective_schedule.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "graph/process_groups.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"

namespace nereid {
namespace {

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

std::string CollectiveGroup(const Node& node) { return NodeAttrString(node, "group"); }

bool IsCollective(const Node& node) {
  const OpDef* def = OpRegistry::Global().Find(node.op());
  return def != nullptr && def->collective;
}

bool Communicates(const Node& node) {
  const OpDef* def = OpRegistry::Global().Find(node.op());
  return def != nullptr && def->communicates;
}

absl::Status AssignCollectiveOrder(Graph& graph) {
  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
  absl::flat_hash_set<const Node*> evaluated = EvaluatedNodes(order, graph);
  absl::flat_hash_map<std::string, int> next, next_eval;
  // Ends a pass wrote with their peer (the parameter server's) keep their
  // channels; pairs are numbered after them.
  int next_channel = 0;
  for (const Node* n : order) {
    if ((n->op() == "Send" || n->op() == "Recv") && n->def().attr().contains("peer")) {
      next_channel = std::max<int>(next_channel, static_cast<int>(NodeAttrInt(*n, "channel", -1)) + 1);
    }
  }
  for (Node* n : order) {
    // A Send/Recv pair of the whole plan (the Recv reads its Send).
    if (n->op() == "Recv" && n->num_inputs() == 1 && n->input_edge(0)->src->op() == "Send") {
      Node* send = n->input_edge(0)->src;
      for (Node* end : {send, n}) {
        auto& attrs = *end->mutable_def()->mutable_attr();
        attrs["channel"] = IntAttr(next_channel);
        attrs["eval"] = BoolAttr(evaluated.contains(n));
      }
      ++next_channel;
      continue;
    }
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

absl::Status CheckCollectivePlan(const Graph& graph) {
  ASSIGN_OR_RETURN(std::vector<GroupDecl> declared, DeclaredGroups(graph));
  const int64_t workers = graph.header().records().workers();
  absl::flat_hash_map<std::string, int> size;  // at the plan's workers (0: unknown)
  for (const GroupDecl& g : declared) {
    size[g.name] = 0;
    if (workers < 1) continue;
    absl::Status fits = MembershipOf(g, g.first, static_cast<int>(workers)).status();
    if (!fits.ok()) return fits;
    size[g.name] = GroupSize(g, static_cast<int>(workers));
  }
  // By group: the nodes at each bucket, and at each evaluation bucket.
  absl::flat_hash_map<std::string, std::map<int64_t, std::vector<const Node*>>> buckets, eval_buckets;
  for (Node* n : graph.nodes()) {
    if (!IsCollective(*n)) continue;
    const std::string group = CollectiveGroup(*n);
    if (group.empty()) continue;
    auto it = size.find(group);
    if (it == size.end()) {
      return NodeError(graph, *n, absl::StrCat("runs on group '", group, "', which the plan's groups do not declare"));
    }
    const int64_t group_size = NodeAttrInt(*n, "group_size", 0);
    if (it->second > 0 && group_size > 0 && group_size != it->second) {
      return NodeError(graph, *n, absl::StrCat("says group '", group, "' has ", group_size, " ranks, but at the plan's ",
                                               workers, " workers it has ", it->second));
    }
    buckets[group][NodeAttrInt(*n, "bucket", -1)].push_back(n);
    const int64_t eval = NodeAttrInt(*n, "eval_bucket", -1);
    if (eval >= 0) eval_buckets[group][eval].push_back(n);
  }
  for (auto* numbering : {&buckets, &eval_buckets}) {
    for (const auto& [group, by_bucket] : *numbering) {
      if (by_bucket.count(-1) > 0 && by_bucket.size() == 1) continue;  // not numbered yet
      int64_t expected = 0;
      for (const auto& [bucket, nodes] : by_bucket) {
        if (bucket != expected || nodes.size() != 1) {
          return NodeError(graph, *nodes.front(),
                           absl::StrCat("group '", group, "': ", numbering == &buckets ? "bucket " : "eval_bucket ",
                                        bucket, nodes.size() > 1 ? " is shared with another collective"
                                                                 : absl::StrCat(" where ", expected, " is missing"),
                                        ": the ranks could pair different collectives (re-plan the model)"));
        }
        ++expected;
      }
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
    if (NodeAttrInt(*n, "eval_bucket", -1) >= 0) ++c.per_evaluation;
  }
  return counts;
}

}  // namespace nereid
