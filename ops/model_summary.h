#ifndef NEREID_OPS_MODEL_SUMMARY_H_
#define NEREID_OPS_MODEL_SUMMARY_H_

// What `nereid check` reports of a shape-inferred graph: per node, its output
// shape and dtype, parameter count, forward FLOPs and activation bytes per
// sample; and the totals. "Per sample" treats the unknown (batch) dimension
// as 1; a node whose output has no batch dimension (a parameter, a loss)
// holds no per-sample activation.

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace nereid {

struct NodeSummary {
  std::string name;
  std::string op;
  std::vector<ShapeAndType> outputs;
  int64_t parameters = 0;        // elements, trainable
  int64_t state = 0;             // elements, non-trainable (running statistics)
  int64_t flops_per_sample = 0;  // what this node computes per sample of the batch
  int64_t activation_bytes_per_sample = 0;
};

struct ModelSummary {
  std::vector<NodeSummary> nodes;  // topological order
  int64_t trainable_parameters = 0;
  int64_t state_elements = 0;
  int64_t parameter_bytes = 0;  // trainable and state
  int64_t flops_per_sample = 0;
  int64_t activation_bytes_per_sample = 0;
  // Whether autodiff has run (the graph holds Gradient nodes): its FLOPs are
  // then the training step's, forward and backward, not the forward pass's.
  bool has_gradients = false;
};

// Expects a graph that passed ValidateAndInferShapes.
ModelSummary SummarizeModel(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_OPS_MODEL_SUMMARY_H_
