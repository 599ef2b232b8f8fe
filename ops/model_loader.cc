#include "ops/model_loader.h"

#include "core/status_macros.h"
#include "graph/import_export.h"
#include "ops/collective_schedule.h"
#include "ops/shape_inference.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<Graph>> LoadModel(const GraphFile& file) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ImportGraph(file));
  RETURN_IF_ERROR(ValidateAndInferShapes(*graph));
  RETURN_IF_ERROR(CheckCollectivePlan(*graph));
  return graph;
}

absl::StatusOr<std::unique_ptr<Graph>> LoadModel(const std::string& path) {
  ASSIGN_OR_RETURN(GraphFile file, ReadGraphFile(path));
  return LoadModel(file);
}

}  // namespace nereid
