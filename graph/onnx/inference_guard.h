#ifndef NEREID_GRAPH_ONNX_INFERENCE_GUARD_H_
#define NEREID_GRAPH_ONNX_INFERENCE_GUARD_H_

// Debian's libonnx (1.12) trusts some attributes in its shape inference: a
// Conv or pool with a stride, dilation or kernel of 0 divides by zero there
// (SIGFPE: the process dies, found by tests/fuzz/parser_fuzz_test.cc), and so
// would a DepthToSpace/SpaceToDepth block size of 0. Such a model cannot be
// valid, so it is refused before inference runs, naming the node.

#include <string>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace nereid {

// Checks every node: the graph's, its subgraphs' (If, Loop, Scan bodies) and
// the model's local functions'.
absl::Status CheckAttributesBeforeInference(const onnx::ModelProto& model, const std::string& source);

}  // namespace nereid

#endif  // NEREID_GRAPH_ONNX_INFERENCE_GUARD_H_
