#include "runtime/strategy_runtime.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "graph/placement.h"

namespace nereid {

StrategyRuntimeRegistry& StrategyRuntimeRegistry::Global() {
  static auto* registry = new StrategyRuntimeRegistry;
  return *registry;
}

absl::Status StrategyRuntimeRegistry::Register(StrategyRuntimeInfo info) {
  if (!info.factory) return absl::InvalidArgumentError("a strategy runtime needs a factory");
  const google::protobuf::FieldDescriptor* field = PlanRecords::descriptor()->FindFieldByName(info.record);
  if (field == nullptr || field->message_type() == nullptr || field->is_repeated()) {
    return absl::InvalidArgumentError(absl::StrCat("strategy runtime '", info.record, "': not a record of PlanRecords"));
  }
  for (const StrategyRuntimeInfo& e : entries_) {
    if (e.record == info.record) return absl::AlreadyExistsError(absl::StrCat("strategy runtime for '", info.record, "'"));
  }
  entries_.push_back(std::move(info));
  return absl::OkStatus();
}

std::unique_ptr<StrategyRuntime> StrategyRuntimeRegistry::For(const Graph& graph) const {
  const PlanRecords& records = graph.header().records();
  for (const StrategyRuntimeInfo& e : entries_) {
    if (records.GetReflection()->HasField(records, PlanRecords::descriptor()->FindFieldByName(e.record))) {
      return e.factory();
    }
  }
  return nullptr;
}

std::pair<std::string, int64_t> PlainStrategyOf(const Graph& graph, int world, int data_shards) {
  const PlanRecords& records = graph.header().records();
  const int64_t model_parallel = std::max(1, records.model_parallel());
  const bool placed = HasPlacedNodes(graph);
  if (placed && records.has_parameter_server()) {
    return {"parameter_server", model_parallel};
  }
  if (placed) return {"model_parallel", world / data_shards};
  return {model_parallel > 1 ? "hybrid" : "data_parallel", model_parallel};
}

}  // namespace nereid
