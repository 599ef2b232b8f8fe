#ifndef NEREID_GRAPH_ONNX_ONNX_IMPORT_H_
#define NEREID_GRAPH_ONNX_ONNX_IMPORT_H_

// ONNX model -> Nereid GraphDef. ONNX's own shape inference runs first, so
// converters know ranks and static dims (auto_pad, Flatten's axis, the
// channels GlobalAveragePool keeps). Initializers become Parameters holding
// their values; the one non-initializer graph input becomes the Input the
// dataset's images feed (batch dimension -1); the graph output becomes
// `logits`, and a labels Input and the loss are added, so the result trains
// as written. With `forward_only`, every graph input is an Input of its exact
// shape and every output an Identity named after it: what the conformance
// test runs.

#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.pb.h"
#include "onnx/onnx_pb.h"

namespace nereid {

struct OnnxImportOptions {
  bool forward_only = false;
  // The loss op added on the output (SoftmaxCrossEntropy, HingeLoss,
  // LogisticLoss).
  std::string loss = "SoftmaxCrossEntropy";
  // Graph attribute "dataset"; empty leaves it to `nereid run --dataset`.
  std::string dataset;
};

absl::StatusOr<GraphDef> ImportOnnxFile(const std::string& path, const OnnxImportOptions& options);
// `source` names the model in errors.
absl::StatusOr<GraphDef> ImportOnnxModel(const onnx::ModelProto& model, const OnnxImportOptions& options,
                                         const std::string& source);

// An ONNX tensor (values inline or raw; external data is refused) as a
// Nereid TensorProto with the same dtype, dims and values.
absl::StatusOr<TensorProto> FromOnnxTensor(const onnx::TensorProto& tensor);

// The Nereid node name an ONNX value or node name becomes (':' would read as
// a port, a leading '^' or '/' as a control input or a path root). A name
// already taken gets "_1", "_2", ... appended; initializers keep theirs
// unless they collide.
std::string OnnxNameToNodeName(const std::string& onnx_name);

// True for paths ending in .onnx.
bool IsOnnxPath(const std::string& path);

}  // namespace nereid

#endif  // NEREID_GRAPH_ONNX_ONNX_IMPORT_H_
