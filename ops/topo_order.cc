#include "ops/topo_order.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/errors.h"
#include "ops/op_registry.h"

namespace nereid {
namespace {

bool IsBackEdge(const Edge* e) {
  const OpDef* def = OpRegistry::Global().Find(e->dst->op());
  return def != nullptr && def->closes_cycles;
}

}  // namespace

absl::StatusOr<std::vector<Node*>> TopologicalOrder(const Graph& graph) {
  std::vector<Node*> nodes = graph.nodes();
  absl::flat_hash_map<const Node*, int> pending;
  // Min-heap on id keeps the order deterministic and close to file order.
  auto later = [](const Node* a, const Node* b) { return a->id() > b->id(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (Node* n : nodes) {
    int count = 0;
    for (int p = 0; p < n->num_inputs(); ++p) {
      const Edge* e = n->input_edge(p);
      if (e != nullptr && !IsBackEdge(e)) ++count;
    }
    for (const Edge* e : n->control_inputs()) {
      if (!IsBackEdge(e)) ++count;
    }
    pending[n] = count;
    if (count == 0) ready.push(n);
  }
  std::vector<Node*> order;
  order.reserve(nodes.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (const Edge* e : n->out_edges()) {
      if (IsBackEdge(e)) continue;
      if (--pending[e->dst] == 0) ready.push(e->dst);
    }
  }
  if (order.size() == nodes.size()) return order;

  // Walk forward from a node left over until a node repeats: that is a cycle.
  Node* start = nullptr;
  for (Node* n : nodes) {
    if (pending[n] > 0) {
      start = n;
      break;
    }
  }
  std::vector<Node*> path;
  absl::flat_hash_map<const Node*, size_t> position;
  Node* cur = start;
  while (!position.contains(cur)) {
    position[cur] = path.size();
    path.push_back(cur);
    Node* next = nullptr;
    for (const Edge* e : cur->out_edges()) {
      if (!IsBackEdge(e) && pending[e->dst] > 0) {
        next = e->dst;
        break;
      }
    }
    if (next == nullptr) break;  // cannot happen: a blocked node has a blocked input
    cur = next;
  }
  std::vector<std::string> names;
  for (size_t i = position.contains(cur) ? position[cur] : 0; i < path.size(); ++i) {
    names.push_back(path[i]->name());
  }
  names.push_back(cur->name());
  return NodeError(graph, *cur,
                   absl::StrCat("cycle that does not pass through a Feedback node: ",
                                absl::StrJoin(names, " -> ")));
}

}  // namespace nereid
