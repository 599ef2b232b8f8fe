#ifndef NEREID_OPS_SHAPE_INFERENCE_H_
#define NEREID_OPS_SHAPE_INFERENCE_H_

// Runs every node's shape function in topological order and stores the
// output shapes and dtypes on the nodes. Checks input dtypes against the op
// signature, and that each Feedback node's input matches what it declares.
// Expects a graph that passed ValidateGraph.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

absl::Status InferShapes(Graph& graph);

// FLOPs per sample of the batch of one node (after InferShapes): its
// op's cost function; an optimizer update's, whose work is per step, is 0.
int64_t FlopsPerSample(const Node& node);

// Validate, then infer shapes: what every loader of a model calls.
absl::Status ValidateAndInferShapes(Graph& graph);

}  // namespace nereid

#endif  // NEREID_OPS_SHAPE_INFERENCE_H_
