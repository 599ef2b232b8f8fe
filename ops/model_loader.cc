#include "ops/model_loader.h"

#include "core/status_macros.h"
#include "graph/import_export.h"
#include "graph/onnx/onnx_import.h"
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
  if (IsOnnxPath(path)) {
    OnnxImportOptions options;
    options.dataset = "fashion-mnist";  // what `nereid import` defaults to; --dataset overrides
    GraphFile file{path, GraphFormat::kBinary, {}, {}};
    ASSIGN_OR_RETURN(file.def, ImportOnnxFile(path, options));
    return LoadModel(file);
  }
  ASSIGN_OR_RETURN(GraphFile file, ReadGraphFile(path));
  return LoadModel(file);
}

}  // namespace nereid
