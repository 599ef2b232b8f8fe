#ifndef NEREID_GRAPH_PLACEMENT_H_
#define NEREID_GRAPH_PLACEMENT_H_

// Where a node runs. One plan serves every rank; each rank runs the nodes
// placed on it:
//   worker: r        rank r only (NodeDef.worker);
//   role: "server"   the members of the declared group "server" (NodeDef.role,
//                    the plan's groups, e.g. a server group of ranks 0-1);
//   neither          every rank.
// Values cross placements only from a Send to its Recv (plan/split_by_rank.h).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"
#include "graph/process_groups.h"

namespace nereid {

struct Placement {
  std::optional<int> worker;
  std::string role;

  bool everywhere() const { return !worker.has_value() && role.empty(); }
  bool operator==(const Placement& other) const { return worker == other.worker && role == other.role; }
  bool operator!=(const Placement& other) const { return !(*this == other); }
  // "rank 1", "role 'server'" or "every rank".
  std::string ToString() const;
};

Placement PlacementOf(const Node& node);
void SetPlacement(Node& node, const Placement& placement);

// Whether `rank` of `world` runs nodes placed at `placement`. An unknown role
// is an error naming it.
absl::StatusOr<bool> RunsOn(const Placement& placement, int rank, int world, const std::vector<GroupDecl>& groups);

// The ranks of `world` that run nodes placed at `placement`, ascending.
absl::StatusOr<std::vector<int>> RanksOf(const Placement& placement, int world, const std::vector<GroupDecl>& groups);

// Whether any node of the graph is placed (the plan runs different nodes on
// different ranks).
bool HasPlacedNodes(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_GRAPH_PLACEMENT_H_
