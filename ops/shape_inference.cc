#include "ops/shape_inference.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"
#include "ops/validate.h"

namespace nereid {
namespace {

const ShapeAndType kNotYetInferred;

std::vector<const ShapeAndType*> InputsOf(const Node& node) {
  std::vector<const ShapeAndType*> inputs;
  for (int p = 0; p < node.num_inputs(); ++p) {
    const Edge* e = node.input_edge(p);
    const auto& outs = e->src->outputs();
    inputs.push_back(e->src_port < static_cast<int>(outs.size()) ? &outs[e->src_port] : &kNotYetInferred);
  }
  return inputs;
}

}  // namespace

absl::Status InferShapes(Graph& graph) {
  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
  for (Node* node : order) node->set_outputs({});
  for (Node* node : order) {
    const OpDef& def = *OpRegistry::Global().Find(node->op());
    std::vector<const ShapeAndType*> inputs = InputsOf(*node);
    if (!def.closes_cycles) {
      for (int p = 0; p < node->num_inputs(); ++p) {
        const ArgSpec& arg = def.InputArg(p);
        DataType dtype = inputs[p]->dtype;
        if (!arg.allowed_types.empty() &&
            std::find(arg.allowed_types.begin(), arg.allowed_types.end(), dtype) == arg.allowed_types.end()) {
          std::vector<std::string> allowed;
          for (DataType t : arg.allowed_types) allowed.push_back(DataTypeName(t));
          return NodeError(graph, *node,
                           absl::StrCat("input '", def.InputName(p), "' from '", node->input_edge(p)->src->name(),
                                        "' is ", DataTypeName(dtype), "; ", def.name, " accepts ",
                                        absl::StrJoin(allowed, ", ")));
        }
      }
    }
    auto attrs = AttrsWithDefaults(*node, def);
    InferenceContext context(node, &def, inputs, attrs);
    absl::StatusOr<std::vector<ShapeAndType>> outputs = def.shape_fn(context);
    if (!outputs.ok()) return NodeError(graph, *node, outputs.status().message(), outputs.status().code());
    if (static_cast<int>(outputs->size()) != def.NumOutputs(node->num_inputs())) {
      return NodeError(graph, *node,
                       absl::StrCat("shape function returned ", outputs->size(), " outputs, op declares ",
                                    def.NumOutputs(node->num_inputs())),
                       absl::StatusCode::kInternal);
    }
    for (const ShapeAndType& out : *outputs) {
      absl::Status limits = out.shape.Validate();
      if (!limits.ok()) return NodeError(graph, *node, absl::StrCat("output: ", limits.message()));
    }
    node->set_outputs(*std::move(outputs));
  }
  // A Feedback node's input was inferred after it: check it now.
  for (Node* node : order) {
    if (!OpRegistry::Global().Find(node->op())->closes_cycles) continue;
    const ShapeAndType& in = *InputsOf(*node)[0];
    const ShapeAndType& out = node->outputs()[0];
    if (in.shape != out.shape || in.dtype != out.dtype) {
      return NodeError(graph, *node,
                       absl::StrCat("input from '", node->input_edge(0)->src->name(), "' is ", in.shape.ToString(),
                                    " ", DataTypeName(in.dtype), " but the feedback declares ",
                                    out.shape.ToString(), " ", DataTypeName(out.dtype)));
    }
  }
  return absl::OkStatus();
}

int64_t FlopsPerSample(const Node& node) {
  const OpDef* def = OpRegistry::Global().Find(node.op());
  if (def == nullptr || !def->cost_fn || node.outputs().empty()) return 0;
  std::vector<const ShapeAndType*> inputs = InputsOf(node);
  auto attrs = AttrsWithDefaults(node, *def);
  InferenceContext context(&node, def, inputs, attrs);
  return def->cost_fn(context, node.outputs());
}

absl::Status ValidateAndInferShapes(Graph& graph) {
  RETURN_IF_ERROR(ValidateGraph(graph));
  return InferShapes(graph);
}

}  // namespace nereid
