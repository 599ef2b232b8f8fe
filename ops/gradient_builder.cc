#include "ops/gradient_builder.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/shape_fns.h"

namespace nereid {

NodeOut GradientBuilder::input(int i) const {
  const Edge* e = node_->input_edge(i);
  return NodeOut{e->src, e->src_port};
}

bool GradientBuilder::has_output_grad(int i) const {
  return i < static_cast<int>(output_grads_.size()) && output_grads_[i].has_value();
}

absl::StatusOr<NodeOut> GradientBuilder::output_grad(int i) const {
  if (!has_output_grad(i)) {
    return absl::InternalError(absl::StrCat("no gradient flows into output ", i, " of '", node_->name(), "'"));
  }
  return *output_grads_[i];
}

const AttrValue& GradientBuilder::attr(absl::string_view name) const {
  const OpDef* def = OpRegistry::Global().Find(node_->op());
  AttrMap attrs = AttrsWithDefaults(*node_, *def);
  static const AttrValue kEmpty;
  auto it = attrs.find(name);
  return it == attrs.end() ? kEmpty : *it->second;
}

absl::StatusOr<NodeOut> GradientBuilder::Add(absl::string_view suffix, absl::string_view op,
                                             const std::vector<NodeOut>& inputs,
                                             std::vector<std::pair<std::string, AttrValue>> attrs) {
  ASSIGN_OR_RETURN(Node * n, AddOpNode(graph_, absl::StrCat(node_->name(), "/grad/", suffix), op, inputs,
                                       std::move(attrs)));
  return NodeOut{n, 0};
}

absl::StatusOr<NodeOut> GradientBuilder::AddWithAttrsOf(absl::string_view suffix, absl::string_view op,
                                                        const std::vector<NodeOut>& inputs,
                                                        const std::vector<std::string>& forward_attrs) {
  std::vector<std::pair<std::string, AttrValue>> attrs;
  for (const std::string& name : forward_attrs) attrs.emplace_back(name, attr(name));
  return Add(suffix, op, inputs, std::move(attrs));
}

OpDefBuilder GradientOp(const char* name, const char* summary, const std::vector<const char*>& inputs,
                        int shape_from) {
  OpDefBuilder b(name);
  b.Summary(summary);
  for (const char* input : inputs) b.Input(input);
  b.Output("dx");
  b.NoGradient("a gradient op (no second derivatives)");
  b.SetShapeFn([shape_from](const InferenceContext& c) -> absl::StatusOr<std::vector<ShapeAndType>> {
    return std::vector<ShapeAndType>{{c.input_shape(shape_from), c.input_dtype(shape_from)}};
  });
  b.SetCostFn(cost_fns::NoFlops);
  return b;
}

OpDefBuilder UnaryOp(const char* name, const char* summary, int64_t flops_per_element, GradFn grad) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Output("y")
      .SetShapeFn(shape_fns::UnchangedShape)
      .SetCostFn(cost_fns::FlopsPerOutput(flops_per_element))
      .SetGradient(std::move(grad));
}

namespace {
GradFn GradientThrough(const char* grad_op, std::vector<std::string> attrs, bool from_output) {
  return [grad_op, attrs, from_output](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", grad_op, {dy, from_output ? g.output(0) : g.input(0)}, attrs));
    return GradResult{dx};
  };
}
}  // namespace

GradFn GradientThroughOutput(const char* grad_op, std::vector<std::string> attrs) {
  return GradientThrough(grad_op, std::move(attrs), /*from_output=*/true);
}

GradFn GradientThroughInput(const char* grad_op, std::vector<std::string> attrs) {
  return GradientThrough(grad_op, std::move(attrs), /*from_output=*/false);
}

absl::StatusOr<GradResult> PassThroughGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  GradResult result(g.node().num_inputs());
  result[0] = dy;
  return result;
}

absl::StatusOr<Node*> AddOpNode(Graph* graph, absl::string_view name, absl::string_view op,
                                const std::vector<NodeOut>& inputs,
                                std::vector<std::pair<std::string, AttrValue>> attrs) {
  NodeDef def;
  def.set_name(std::string(name));
  def.set_op(std::string(op));
  for (auto& [key, value] : attrs) (*def.mutable_attr())[key] = std::move(value);
  ASSIGN_OR_RETURN(Node * n, graph->AddNode(std::move(def), static_cast<int>(inputs.size())));
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
    RETURN_IF_ERROR(graph->AddEdge(inputs[i].node, inputs[i].port, n, i).status());
  }
  return n;
}

}  // namespace nereid
