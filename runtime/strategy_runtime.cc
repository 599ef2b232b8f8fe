#include "runtime/strategy_runtime.h"

#include "absl/strings/str_cat.h"
#include "graph/placement.h"

namespace nereid {

StrategyRuntimeRegistry& StrategyRuntimeRegistry::Global() {
  static auto* registry = new StrategyRuntimeRegistry;
  return *registry;
}

absl::Status StrategyRuntimeRegistry::Register(StrategyRuntimeInfo info) {
  if (info.attr.empty() || !info.factory) return absl::InvalidArgumentError("a strategy runtime needs attr and factory");
  for (const StrategyRuntimeInfo& e : entries_) {
    if (e.attr == info.attr) return absl::AlreadyExistsError(absl::StrCat("strategy runtime for '", info.attr, "'"));
  }
  entries_.push_back(std::move(info));
  return absl::OkStatus();
}

std::unique_ptr<StrategyRuntime> StrategyRuntimeRegistry::For(const Graph& graph) const {
  for (const StrategyRuntimeInfo& e : entries_) {
    if (!GraphAttr(graph, e.attr).empty()) return e.factory();
  }
  return nullptr;
}

std::pair<std::string, int64_t> PlainStrategyOf(const Graph& graph, int world, int data_shards) {
  const int64_t model_parallel = GraphAttrInt(graph, "model_parallel", 1);
  const bool placed = HasPlacedNodes(graph);
  if (placed && (GraphAttrInt(graph, "servers", 0) > 0 || !GraphAttr(graph, "parameter_server").empty())) {
    return {"parameter_server", model_parallel};
  }
  if (placed) return {"model_parallel", world / data_shards};
  return {model_parallel > 1 ? "hybrid" : "data_parallel", model_parallel};
}

}  // namespace nereid
