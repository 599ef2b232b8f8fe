#include "ops/placement_propagation.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/errors.h"

namespace nereid {
namespace {

bool IsTransfer(const Node& src, const Node& dst) { return src.op() == "Send" && dst.op() == "Recv"; }

// Both ends of a pair run on one rank each.
absl::Status CheckTransferEnds(const Graph& graph, const Node& send, const Node& recv) {
  for (const Node* end : {&send, &recv}) {
    if (!PlacementOf(*end).worker.has_value()) {
      return NodeError(graph, *end,
                       absl::StrCat("a ", end->op(), " between placed parts runs on one rank (worker), not on ",
                                    PlacementOf(*end).ToString(), "; groups exchange through group collectives"));
    }
  }
  if (send.out_edges().size() != 1) {
    return NodeError(graph, send, "a Send feeds exactly one Recv (send the value once per receiver)");
  }
  return absl::OkStatus();
}

}  // namespace

// To a fixed point, as a Parameter takes its placement from its update (a
// Feedback, later in the order), which takes it from its inputs.
absl::StatusOr<absl::flat_hash_map<const Node*, Placement>> EffectivePlacement(const Graph& graph) {
  absl::flat_hash_map<const Node*, Placement> at;
  for (const Node* n : graph.nodes()) at[n] = PlacementOf(*n);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Node* n : graph.nodes()) {
      if (!at[n].everywhere() || n->op() == "Recv") continue;
      std::optional<Placement> agreed;
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Placement& p = at[n->input_edge(i)->src];
        if (p.everywhere()) continue;
        if (agreed.has_value() && *agreed != p) {
          return NodeError(graph, *n, absl::StrCat("reads values placed on ", agreed->ToString(), " and on ",
                                                   p.ToString(), ": place it, or move a value with Send and Recv"));
        }
        agreed = p;
      }
      if (agreed.has_value()) {
        at[n] = *agreed;
        changed = true;
      }
    }
  }
  // Values cross placements only from a Send to its Recv.
  for (const Node* n : graph.nodes()) {
    const Placement& here = at[n];
    std::vector<const Edge*> in;
    for (int i = 0; i < n->num_inputs(); ++i) in.push_back(n->input_edge(i));
    for (const Edge* e : n->control_inputs()) in.push_back(e);
    for (const Edge* e : in) {
      const Placement& there = at[e->src];
      if (there.everywhere() || there == here) continue;
      if (IsTransfer(*e->src, *n)) {
        RETURN_IF_ERROR(CheckTransferEnds(graph, *e->src, *n));
        continue;
      }
      return NodeError(graph, *n, absl::StrCat("runs on ", here.ToString(), " but reads '", e->src->name(),
                                               "' on ", there.ToString(), ": move the value with Send and Recv"));
    }
  }
  return at;
}

bool IsCutEnd(const Node& node) {
  return (node.op() == "Send" || node.op() == "Recv") && NodeAttrInt(node, "peer", -1) >= 0;
}

absl::Status PropagatePlacement(Graph& graph) {
  ASSIGN_OR_RETURN(auto at, EffectivePlacement(graph));
  for (Node* n : graph.nodes()) {
    if (PlacementOf(*n) != at[n]) SetPlacement(*n, at[n]);
  }
  return absl::OkStatus();
}

}  // namespace nereid
