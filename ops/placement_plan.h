#ifndef NEREID_OPS_PLACEMENT_PLAN_H_
#define NEREID_OPS_PLACEMENT_PLAN_H_

// A plan whose nodes are placed (graph/placement.h) is one dataflow graph for
// all ranks; each rank runs its own part of it.
//
//   PropagatePlacement  after every pass: a node a pass added without a
//                       placement takes the one its placed inputs agree on
//                       (gradients, optimizer updates and sums follow the
//                       forward nodes), and a value crosses placements only
//                       from a Send to its Recv.
//   ProjectForRank      one rank's part: its nodes; each Send/Recv pair cut
//                       in two ends that know their peer rank.
//   SplitPlanAcrossRanks  every rank's part, checked together:
//   CheckPartsAcrossRanks every rank's graph loads and declares the same
//                       workers and groups, every Send has its Recv (peer,
//                       channel, shape, dtype), and every group's members
//                       issue the same collectives in the same order; errors
//                       name the ranks and the nodes, before anything runs.
//                       Per-rank plan files (ops/rank_plan_file.h) are
//                       checked the same way.

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

absl::Status PropagatePlacement(Graph& graph);

// Whether `node` is a Send or Recv of a rank's part whose other end is on
// another rank (its `peer` is set); in the whole plan both ends are local.
bool IsCutEnd(const Node& node);

absl::StatusOr<std::unique_ptr<Graph>> ProjectForRank(const Graph& graph, int rank, int world);

absl::StatusOr<std::vector<std::unique_ptr<Graph>>> SplitPlanAcrossRanks(const Graph& graph, int world);

// parts[r] is rank r's graph.
absl::Status CheckPartsAcrossRanks(const std::vector<std::unique_ptr<Graph>>& parts);

}  // namespace nereid

#endif  // NEREID_OPS_PLACEMENT_PLAN_H_
