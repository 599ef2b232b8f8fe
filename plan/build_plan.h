#ifndef NEREID_PLAN_BUILD_PLAN_H_
#define NEREID_PLAN_BUILD_PLAN_H_

// From a model and a pass pipeline to the plan every rank runs, in one place.
// Every front end plans through BuildPlan: `nereid run` (and its local
// launcher, which plans once before any worker starts and hands each worker
// the result), `nereid plan`, `nereid model` and `nereid bench`; a worker
// started on its own (torchrun, Slurm, --rank/--world) plans for itself the
// same way, so every rank of a run holds the same PlanDef.
//
//   front end --PipelineFor--> stages --BuildPlan--> PlanDef --LoadRankPlan--> this rank's graph
//
// A model given as a plan already (a one-graph plan written by `nereid plan`,
// or a per-rank PlanDef file) is taken as it is and checked against the
// target: the question "is this a plan?" is answered here only.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"

namespace nereid {

// The passes a run uses when none are given.
inline constexpr char kDefaultPipeline[] = "autodiff,sgd(lr=0.01,momentum=0.9)";

// `passes` ("" = kDefaultPipeline, with parameter_server(servers=S) when the
// target has S > 0 servers) parsed, with the passes the target implies added
// (data_parallel for several workers): what a run on `target` plans with.
// Errors are the user's (a misspelt pass or option, a wrong order).
absl::StatusOr<std::vector<PipelineStage>> PipelineFor(const std::string& passes, const PlanTarget& target);

struct PlanRequest {
  // A model (graph file or ONNX), a one-graph plan, or a per-rank plan file.
  std::string model;
  // From PipelineFor; not used when `model` is a plan already.
  std::vector<PipelineStage> pipeline;
  PlanTarget target;
  // A model is checked trainable on this dataset before any pass runs
  // ("" = the model's own); analyses of a forward graph skip the check.
  std::string dataset;
  bool check_trainable = true;
  // Analyses that read only BuiltPlan::whole skip splitting it by rank, and
  // take a plan given as the model as it is (not checked against `target`).
  bool whole_only = false;
  // Graphs written after chosen passes (`nereid plan --dump-after`).
  PipelineOptions pipeline_options;
};

struct BuiltPlan {
  // What the ranks run: one graph for all (replicated) or one per rank.
  PlanDef plan;
  // The plan as one graph before it is split by rank, for the analyses of
  // `nereid model` and `nereid bench`; null when `model` was a per-rank file.
  std::unique_ptr<Graph> whole;
  // What each pass did; empty when `model` was a plan already.
  std::vector<PassReport> reports;
};

absl::StatusOr<BuiltPlan> BuildPlan(const PlanRequest& request);

// One rank's part of a plan, loaded (validated, shapes inferred); a per-rank
// plan's parts are checked together first. `name` is what errors call the plan.
struct RankPlan {
  std::unique_ptr<Graph> graph;
  int loss_rank = 0;  // the first rank whose graph holds the loss (it prints progress)
};
absl::StatusOr<RankPlan> LoadRankPlan(const PlanDef& plan, int rank, const std::string& name);

}  // namespace nereid

#endif  // NEREID_PLAN_BUILD_PLAN_H_
