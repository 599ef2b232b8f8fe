#ifndef NEREID_OPS_PLACEMENT_PROPAGATION_H_
#define NEREID_OPS_PLACEMENT_PROPAGATION_H_

// A plan whose nodes are placed (graph/placement.h) is one dataflow graph for
// all ranks. After every pass, a node the pass added without a placement
// takes the one its placed inputs agree on (gradients, optimizer updates and
// sums follow the forward nodes), and a value crosses placements only from a
// Send to its Recv. Splitting the plan into each rank's part is the plan
// package's (plan/split_by_rank.h).

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/ir.h"
#include "graph/placement.h"

namespace nereid {

// Each node's placement, with the unplaced nodes that read placed values
// following them. Errors name a node that reads values placed apart.
absl::StatusOr<absl::flat_hash_map<const Node*, Placement>> EffectivePlacement(const Graph& graph);

// Sets every node's placement to its effective one.
absl::Status PropagatePlacement(Graph& graph);

// Whether `node` is a Send or Recv of a rank's part whose other end is on
// another rank (its `peer` is set); in the whole plan both ends are local.
bool IsCutEnd(const Node& node);

}  // namespace nereid

#endif  // NEREID_OPS_PLACEMENT_PROPAGATION_H_
