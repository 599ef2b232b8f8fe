#ifndef NEREID_OPS_TOPO_ORDER_H_
#define NEREID_OPS_TOPO_ORDER_H_

// Orders nodes so that every node comes after its inputs, treating the input
// edges of cycle-closing ops (Feedback) as back edges. Ties keep id order, so
// the order is deterministic. A cycle that does not pass through a Feedback
// node is an error that lists the cycle.

#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

absl::StatusOr<std::vector<Node*>> TopologicalOrder(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_OPS_TOPO_ORDER_H_
