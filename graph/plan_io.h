#ifndef NEREID_GRAPH_PLAN_IO_H_
#define NEREID_GRAPH_PLAN_IO_H_

// Per-rank plan files: a PlanDef holding the graph each rank runs
// (`nereid plan --per-rank`), beside the one-graph plan files of graph_io.h.
//
// A text file is a per-rank plan when it parses as a PlanDef with at least
// one worker graph (a GraphDef's `node` field is not a PlanDef's, so a graph
// never does); a binary one when it is named *.plan.pb.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.pb.h"
#include "graph/graph_io.h"

namespace nereid {

inline constexpr int kPlanFormatVersion = 1;

// The plan in the file, or nullopt when the file holds one graph (read it
// with ReadGraphFile). Errors: the file cannot be read, or it is a plan of an
// unknown version.
absl::StatusOr<std::optional<PlanDef>> ReadPlanFile(const std::string& path);

// Writes atomically; binary when `path` ends in .pb (name it *.plan.pb so it
// is recognised when read back).
absl::Status WritePlanFile(const PlanDef& plan, const std::string& path);

}  // namespace nereid

#endif  // NEREID_GRAPH_PLAN_IO_H_
