#include "passes/pass_properties.h"

namespace nereid {

bool GraphHasProperty(const Graph& graph, absl::string_view property) {
  if (property == kPipelinedProperty) return graph.header().records().pipeline_width() > 0;
  if (property == kPlacedProperty) return !graph.header().records().placement().device().empty();
  // Every optimizer adds the learning-rate schedule (optimizer_common.h).
  if (property == kOptimizerProperty) {
    for (const Node* n : graph.nodes()) {
      if (n->op() == "LearningRate") return true;
    }
  }
  return false;
}

}  // namespace nereid
