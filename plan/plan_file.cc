#include "plan/plan_file.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/fingerprint.h"
#include "core/status_macros.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "graph/plan_io.h"
#include "ops/model_loader.h"
#include "plan/split_by_rank.h"

namespace nereid {
namespace {

std::string Hex(uint64_t h) { return absl::StrCat(absl::Hex(h, absl::kZeroPad16)); }

}  // namespace

std::string PlanFingerprint(const Graph& graph) { return Hex(Fnv1a(GraphDefToText(ExportGraph(graph)))); }

std::string PlanFingerprint(const std::vector<std::unique_ptr<Graph>>& parts) {
  uint64_t h = kFnv1aOffset;
  for (const auto& part : parts) h = Fnv1a(GraphDefToText(ExportGraph(*part)), h);
  return Hex(h);
}

namespace {

// The same digest from the file's graphs as written (MakePlanDef stores
// ExportGraph of each part), so an edit is caught before anything loads.
std::string StoredGraphsFingerprint(const PlanDef& plan) {
  uint64_t h = kFnv1aOffset;
  for (const WorkerGraph& worker : plan.worker()) h = Fnv1a(GraphDefToText(worker.graph()), h);
  return Hex(h);
}

}  // namespace

PlanDef MakePlanDef(const std::vector<std::unique_ptr<Graph>>& parts, GraphDef source, RunConfig config) {
  PlanDef plan;
  plan.set_version(kPlanFormatVersion);
  *plan.mutable_source() = std::move(source);
  config.set_world_size(static_cast<int32_t>(parts.size()));
  *plan.mutable_config() = std::move(config);
  for (size_t r = 0; r < parts.size(); ++r) {
    WorkerGraph* worker = plan.add_worker();
    worker->set_rank(static_cast<int32_t>(r));
    *worker->mutable_graph() = ExportGraph(*parts[r]);
  }
  plan.set_fingerprint(PlanFingerprint(parts));
  return plan;
}

std::string PlanDefFingerprint(const PlanDef& plan) { return StoredGraphsFingerprint(plan); }

namespace {

// `graph` with its placement left out: each copy's consumers read the
// copy's input instead, the copies go, and no node names a device.
GraphDef WithoutPlacement(GraphDef graph) {
  absl::flat_hash_map<std::string, std::string> copied_from;  // copy node -> its input
  for (const NodeDef& node : graph.node()) {
    if ((node.op() == "CopyToDevice" || node.op() == "CopyToHost") && node.input_size() == 1) {
      copied_from[node.name()] = node.input(0);
    }
  }
  GraphDef out = graph;
  out.clear_node();
  for (NodeDef node : graph.node()) {
    if (copied_from.contains(node.name())) continue;
    for (std::string& input : *node.mutable_input()) {
      const bool control = absl::StartsWith(input, "^");
      std::string name = control ? input.substr(1) : input;
      if (absl::EndsWith(name, ":0")) name.resize(name.size() - 2);
      // Chains of copies (host -> device -> host) resolve to the original.
      while (copied_from.contains(name)) name = copied_from.at(name);
      if (name != (control ? input.substr(1) : input)) input = control ? absl::StrCat("^", name) : name;
    }
    node.clear_device();
    *out.add_node() = std::move(node);
  }
  if (out.records().has_placement()) out.mutable_records()->clear_placement();
  if (out.has_records() && out.records().ByteSizeLong() == 0) out.clear_records();  // as an unplaced plan has it
  return out;
}

}  // namespace

std::string ComputationFingerprint(const PlanDef& plan) {
  uint64_t h = kFnv1aOffset;
  for (const WorkerGraph& worker : plan.worker()) h = Fnv1a(GraphDefToText(WithoutPlacement(worker.graph())), h);
  return Hex(h);
}

PlanDef MakeReplicatedPlanDef(const Graph& graph, int world, GraphDef source, RunConfig config) {
  PlanDef plan;
  plan.set_version(kPlanFormatVersion);
  plan.set_replicated(true);
  *plan.mutable_source() = std::move(source);
  config.set_world_size(world);
  *plan.mutable_config() = std::move(config);
  WorkerGraph* worker = plan.add_worker();
  worker->set_rank(0);
  *worker->mutable_graph() = ExportGraph(graph);
  plan.set_fingerprint(PlanFingerprint(graph));
  return plan;
}

namespace {

absl::Status CheckFingerprint(const PlanDef& plan, const std::string& path) {
  if (plan.fingerprint().empty() || plan.fingerprint() == StoredGraphsFingerprint(plan)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(path, ": the fingerprint ", plan.fingerprint(),
                                          " does not match the graphs (", StoredGraphsFingerprint(plan),
                                          "): the file changed after it was written; clear `fingerprint` to "
                                          "accept an edit"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> LoadReplicatedGraph(const PlanDef& plan, const std::string& path) {
  if (!plan.replicated() || plan.worker_size() != 1 || plan.config().world_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a replicated plan holds one graph and its world_size (it holds ", plan.worker_size(),
        " graphs for ", plan.config().world_size(), " workers)"));
  }
  RETURN_IF_ERROR(CheckFingerprint(plan, path));
  GraphFile file;
  file.path = path;
  file.def = plan.worker(0).graph();
  return LoadModel(file);
}

absl::StatusOr<std::vector<std::unique_ptr<Graph>>> LoadRankGraphs(const PlanDef& plan, const std::string& path) {
  if (plan.replicated()) {
    std::vector<std::unique_ptr<Graph>> parts;
    for (int r = 0; r < plan.config().world_size() || parts.empty(); ++r) {
      ASSIGN_OR_RETURN(std::unique_ptr<Graph> part, LoadReplicatedGraph(plan, path));
      parts.push_back(std::move(part));
    }
    return parts;
  }
  if (plan.config().world_size() != 0 && plan.config().world_size() != plan.worker_size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the plan is for ", plan.config().world_size(),
                                                   " workers but holds ", plan.worker_size(), " graphs"));
  }
  for (int r = 0; r < plan.worker_size(); ++r) {
    if (plan.worker(r).rank() != r) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": worker graph ", r, " is for rank ", plan.worker(r).rank(),
                                                     ": list the ranks 0..", plan.worker_size() - 1, " in order"));
    }
  }
  RETURN_IF_ERROR(CheckFingerprint(plan, path));
  std::vector<std::unique_ptr<Graph>> parts;
  for (int r = 0; r < plan.worker_size(); ++r) {
    const WorkerGraph& worker = plan.worker(r);
    GraphFile file;
    file.path = absl::StrCat(path, ", rank ", r, "'s graph");
    file.def = worker.graph();
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> part, LoadModel(file));
    parts.push_back(std::move(part));
  }
  absl::Status together = CheckPartsAcrossRanks(parts);
  if (!together.ok()) return absl::Status(together.code(), absl::StrCat(path, ": ", together.message()));
  return parts;
}

}  // namespace nereid
