#ifndef NEREID_OPS_MODEL_LOADER_H_
#define NEREID_OPS_MODEL_LOADER_H_

// Loads a model file (text or binary) into a validated Graph with inferred
// shapes, or returns the first error, naming file, line, node and op. An
// .onnx file is imported first (graph/onnx/onnx_import.h) as a training graph
// on Fashion-MNIST (the run's --dataset overrides the dataset).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph_io.h"
#include "graph/ir.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<Graph>> LoadModel(const std::string& path);
// The same, from a file already read (tests and the fuzzer use it).
absl::StatusOr<std::unique_ptr<Graph>> LoadModel(const GraphFile& file);

}  // namespace nereid

#endif  // NEREID_OPS_MODEL_LOADER_H_
