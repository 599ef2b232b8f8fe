#ifndef NEREID_PLAN_PLAN_FILE_H_
#define NEREID_PLAN_PLAN_FILE_H_

// A plan as the graph each rank runs (PlanDef, written by
// `nereid plan --per-rank` and by the local launcher for its workers): rank r
// runs worker r's graph as it is in the file (or worker 0's, in a replicated
// plan), so a part can be read, edited and checked on its own. Loading checks
// the parts together (CheckPartsAcrossRanks) before anything runs.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"

namespace nereid {

// What ranks compare at the rendezvous: a digest of the graph (a one-graph
// plan) or of every rank's graph in order (a per-rank plan).
std::string PlanFingerprint(const Graph& graph);
std::string PlanFingerprint(const std::vector<std::unique_ptr<Graph>>& parts);
// What the plan's graphs compute, whatever runs them: the fingerprint of its
// graphs with the placement left out (NodeDef.device, the CopyToDevice and
// CopyToHost nodes the place pass inserted, records.placement). Equal for a
// plan and the same plan placed on any device, so that a checkpoint written
// on one device resumes on another.
std::string ComputationFingerprint(const PlanDef& plan);

// parts[r] becomes worker r; `source` is the model the plan came from and
// `config` how it was made (both for the reader; running needs neither).
PlanDef MakePlanDef(const std::vector<std::unique_ptr<Graph>>& parts, GraphDef source, RunConfig config);

// The digest of the graphs as the file holds them (what `fingerprint` is
// when MakePlanDef wrote it).
std::string PlanDefFingerprint(const PlanDef& plan);

// One graph every one of `world` ranks runs (PlanDef::replicated).
PlanDef MakeReplicatedPlanDef(const Graph& graph, int world, GraphDef source, RunConfig config);

// A replicated plan's graph, loaded; the same checks as below.
absl::StatusOr<std::unique_ptr<Graph>> LoadReplicatedGraph(const PlanDef& plan, const std::string& path);

// Every worker's graph (a replicated plan's once per rank), loaded (validated, shapes inferred) and checked
// together. Errors name `path` and the rank: workers missing, repeated or out
// of order, a fingerprint that does not match the graphs (the file changed
// after it was written; clear the field to accept an edit), a graph that
// does not load, or parts that do not fit together.
absl::StatusOr<std::vector<std::unique_ptr<Graph>>> LoadRankGraphs(const PlanDef& plan, const std::string& path);

}  // namespace nereid

#endif  // NEREID_PLAN_PLAN_FILE_H_
