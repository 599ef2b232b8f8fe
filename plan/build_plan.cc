#include "plan/build_plan.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "graph/placement.h"
#include "graph/plan_io.h"
#include "ops/model_loader.h"
#include "ops/op_registry.h"
#include "ops/placement_propagation.h"
#include "ops/trainability.h"
#include "plan/plan_file.h"
#include "plan/split_by_rank.h"

namespace nereid {
namespace {

// A graph with an optimizer's update (a Feedback) is a plan already.
bool IsPlanned(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (n->op() == "Feedback") return true;
  }
  return false;
}

// The servers the plan has (its records) against those the run asked for.
absl::Status CheckServers(const PlanRecords& records, const PlanTarget& target) {
  const int64_t planned = records.parameter_server().servers();
  if (target.servers < 0 || planned == target.servers) return absl::OkStatus();
  const bool colocated = records.parameter_server().colocated();
  return absl::InvalidArgumentError(absl::StrCat(
      "--servers ", target.servers, ", but the plan has ", planned, " parameter server", planned == 1 ? "" : "s",
      planned > 0   ? absl::StrCat(" (parameter_server(servers=", planned, "))")
      : colocated ? std::string(" of its own (colocated: every worker serves; leave --servers out)")
                  : std::string(" (no parameter_server pass)"),
      colocated ? "" : ": give the same count"));
}

// A one-graph plan (planned here or read): split by rank when its nodes are
// placed, else one graph every rank runs.
absl::StatusOr<PlanDef> PlanDefOf(Graph& graph, const GraphDef& source, const std::string& passes,
                                  const PlanTarget& target) {
  RunConfig config;
  config.set_passes(passes);
  if (HasPlacedNodes(graph)) {
    // Unplaced nodes follow their placed inputs (a hand-written plan leaves them so).
    RETURN_IF_ERROR(PropagatePlacement(graph));
    ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Graph>> parts, SplitPlanAcrossRanks(graph, target.workers));
    return MakePlanDef(parts, source, std::move(config));
  }
  return MakeReplicatedPlanDef(graph, target.workers, source, std::move(config));
}

}  // namespace

absl::StatusOr<std::vector<PipelineStage>> PipelineFor(const std::string& passes, const PlanTarget& target) {
  std::string text = passes.empty() ? kDefaultPipeline : passes;
  if (passes.empty() && target.servers > 0) absl::StrAppend(&text, ",parameter_server(servers=", target.servers, ")");
  ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, ParsePipeline(text));
  RETURN_IF_ERROR(AddImpliedPasses(pipeline, target));
  return pipeline;
}

absl::StatusOr<BuiltPlan> BuildPlan(const PlanRequest& request) {
  const PlanTarget& target = request.target;
  if (target.workers < 1) return absl::InvalidArgumentError("a plan needs at least one rank");
  BuiltPlan built;
  ASSIGN_OR_RETURN(std::optional<PlanDef> per_rank, ReadPlanFile(request.model));
  if (per_rank.has_value()) {
    if (request.whole_only) return built;  // no whole graph to analyse
    const int world = per_rank->replicated() ? per_rank->config().world_size() : per_rank->worker_size();
    if (world != target.workers) {
      return absl::FailedPreconditionError(
          absl::StrCat(request.model, " holds graphs for ", world, " workers, not ", target.workers));
    }
    // Loaded and checked together here too, so a broken file is refused
    // before any worker starts; every rank's graph declares the servers.
    RETURN_IF_ERROR(LoadRankPlan(*per_rank, 0, request.model).status());
    RETURN_IF_ERROR(CheckServers(per_rank->worker(0).graph().records(), target));
    built.plan = *std::move(per_rank);
    return built;
  }
  ASSIGN_OR_RETURN(built.whole, LoadModel(request.model));
  Graph& graph = *built.whole;
  const GraphDef source = ExportGraph(graph);
  std::string passes;
  if (IsPlanned(graph)) {
    if (request.whole_only) return built;
    // A plan made for a number of workers runs on that many.
    const int64_t recorded = graph.header().records().workers();
    const int64_t planned = recorded > 0 ? recorded : target.workers;
    if (planned != target.workers) {
      return absl::FailedPreconditionError(
          absl::StrCat(request.model, " was planned for ", planned, " workers, not ", target.workers));
    }
  } else {
    // A model that cannot train says why before any pass or peer is involved.
    if (request.check_trainable && !HasPlacedNodes(graph)) {
      RETURN_IF_ERROR(CheckTrainable(graph, request.dataset).status());
    }
    // The plan records the world it is for (the runtime and a later plan of
    // it read it); the passes are given it.
    if (target.workers > 1) graph.mutable_header()->mutable_records()->set_workers(target.workers);
    // One worker fixes no world: the passes that partition over several say
    // so ("plan with --workers N") rather than plan for one.
    PipelineOptions pipeline_options = request.pipeline_options;
    pipeline_options.target = target;
    if (target.workers <= 1) pipeline_options.target->workers = 0;
    ASSIGN_OR_RETURN(built.reports, RunPipeline(graph, request.pipeline, pipeline_options));
    passes = PipelineText(request.pipeline);
  }
  RETURN_IF_ERROR(CheckServers(graph.header().records(), target));
  if (request.whole_only) return built;
  ASSIGN_OR_RETURN(built.plan, PlanDefOf(graph, source, passes, target));
  return built;
}

absl::StatusOr<RankPlan> LoadRankPlan(const PlanDef& plan, int rank, const std::string& name) {
  RankPlan mine;
  if (plan.replicated()) {
    ASSIGN_OR_RETURN(mine.graph, LoadReplicatedGraph(plan, name));
    if (rank < 0 || rank >= plan.config().world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": rank ", rank, " is outside the plan's ", plan.config().world_size(), " ranks"));
    }
    return mine;
  }
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Graph>> parts, LoadRankGraphs(plan, name));
  if (rank < 0 || rank >= static_cast<int>(parts.size())) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": rank ", rank, " is outside the plan's ", parts.size(),
                                                   " ranks"));
  }
  const std::string loss = GraphAttr(*parts[0], "loss");
  auto holder = std::find_if(parts.begin(), parts.end(), [&](const auto& g) { return g->FindNode(loss) != nullptr; });
  if (holder == parts.end()) return absl::FailedPreconditionError(absl::StrCat("no rank holds the loss '", loss, "'"));
  mine.loss_rank = static_cast<int>(holder - parts.begin());
  mine.graph = std::move(parts[rank]);
  return mine;
}

}  // namespace nereid
