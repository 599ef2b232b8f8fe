#include "ops/model_summary.h"

#include "ops/shape_fns.h"
#include "ops/shape_inference.h"
#include "ops/topo_order.h"

namespace nereid {

ModelSummary SummarizeModel(const Graph& graph) {
  ModelSummary summary;
  absl::StatusOr<std::vector<Node*>> order = TopologicalOrder(graph);
  std::vector<Node*> nodes = order.ok() ? *order : graph.nodes();
  for (const Node* node : nodes) {
    NodeSummary s;
    s.name = node->name();
    s.op = node->op();
    s.outputs = node->outputs();
    if (node->op() == "Parameter" && !s.outputs.empty()) {
      int64_t elements = s.outputs[0].shape.KnownElements();
      auto trainable = node->def().attr().find("trainable");
      bool is_trainable = trainable == node->def().attr().end() || trainable->second.b();
      (is_trainable ? s.parameters : s.state) = elements;
      summary.parameter_bytes += elements * DataTypeSize(s.outputs[0].dtype);
    }
    s.flops_per_sample = FlopsPerSample(*node);
    if (node->op() == "Gradient") summary.has_gradients = true;
    for (const ShapeAndType& out : s.outputs) {
      if (out.shape.HasUnknownDim()) {
        s.activation_bytes_per_sample += out.shape.KnownElements() * DataTypeSize(out.dtype);
      }
    }
    summary.trainable_parameters += s.parameters;
    summary.state_elements += s.state;
    summary.flops_per_sample = cost_fns::SaturatingAdd(summary.flops_per_sample, s.flops_per_sample);
    summary.activation_bytes_per_sample += s.activation_bytes_per_sample;
    summary.nodes.push_back(std::move(s));
  }
  return summary;
}

}  // namespace nereid
