#ifndef NEREID_PLAN_SPLIT_BY_RANK_H_
#define NEREID_PLAN_SPLIT_BY_RANK_H_

// A placed plan (graph/placement.h) is one dataflow graph for all ranks; each
// rank runs its own part of it.
//
//   ProjectForRank        one rank's part: its nodes; each Send/Recv pair cut
//                         in two ends that know their peer rank.
//   SplitPlanAcrossRanks  every rank's part, checked together:
//   CheckPartsAcrossRanks every rank's graph loads and declares the same
//                         workers and groups, every Send has its Recv (peer,
//                         channel, shape, dtype), and every group's members
//                         issue the same collectives in the same order; errors
//                         name the ranks and the nodes, before anything runs.
//                         Per-rank plan files (plan/plan_file.h) are checked
//                         the same way.

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<Graph>> ProjectForRank(const Graph& graph, int rank, int world);

absl::StatusOr<std::vector<std::unique_ptr<Graph>>> SplitPlanAcrossRanks(const Graph& graph, int world);

// parts[r] is rank r's graph.
absl::Status CheckPartsAcrossRanks(const std::vector<std::unique_ptr<Graph>>& parts);

}  // namespace nereid

#endif  // NEREID_PLAN_SPLIT_BY_RANK_H_
