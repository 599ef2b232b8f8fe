#include "graph/model_loader.h"

#include "graph/import_export.h"
#include "graph/shape_inference.h"
#include "graph/status_macros.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<Graph>> LoadModel(const GraphFile& file) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ImportGraph(file));
  RETURN_IF_ERROR(ValidateAndInferShapes(*graph));
  return graph;
}

absl::StatusOr<std::unique_ptr<Graph>> LoadModel(const std::string& path) {
  ASSIGN_OR_RETURN(GraphFile file, ReadGraphFile(path));
  return LoadModel(file);
}

}  // namespace nereid
