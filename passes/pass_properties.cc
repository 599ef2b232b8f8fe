#include "passes/pass_properties.h"

namespace nereid {

bool GraphHasProperty(const Graph& graph, absl::string_view property) {
  if (property == kPipelinedProperty) return graph.header().records().pipeline_width() > 0;
  return false;
}

}  // namespace nereid
