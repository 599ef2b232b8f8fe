// Elementwise nonlinearities and softmax.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

// The gradient of y = f(x) expressed through y: dx = FGrad(dy, y).
GradFn GradientFromOutput(const char* grad_op, std::vector<std::string> attrs = {}) {
  return [grad_op, attrs](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", grad_op, {dy, g.output(0)}, attrs));
    return GradResult{dx};
  };
}

OpDefBuilder Unary(const char* name, const char* summary, int64_t flops_per_element, const char* grad_op) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Output("y")
      .SetShapeFn(shape_fns::UnchangedShape)
      .SetCostFn(cost_fns::FlopsPerOutput(flops_per_element))
      .SetGradient(GradientFromOutput(grad_op));
}

NEREID_REGISTER_OP(Unary("Relu", "max(x, 0), elementwise.", 1, "ReluGrad"));
NEREID_REGISTER_OP(Unary("Sigmoid", "1 / (1 + exp(-x)), elementwise.", 4, "SigmoidGrad"));
NEREID_REGISTER_OP(Unary("Tanh", "tanh(x), elementwise.", 4, "TanhGrad"));

NEREID_REGISTER_OP(GradientOp("ReluGrad", "dy where y > 0, else 0.", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("SigmoidGrad", "dy * y * (1 - y).", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("TanhGrad", "dy * (1 - y^2).", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("SoftmaxGrad", "y * (dy - sum(dy * y)) along `axis`.", {"dy", "y"}, 0)
                       .Attr("axis", AttrType::kInt, IntAttr(-1)));

absl::StatusOr<std::vector<ShapeAndType>> SoftmaxShape(const InferenceContext& c) {
  int rank = c.input_shape(0).rank();
  int64_t axis = c.GetInt("axis");
  if (rank == 0 || axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'axis' ", axis, " is out of range for ", shape_fns::DescribeInput(c, 0)));
  }
  return shape_fns::UnchangedShape(c);
}

NEREID_REGISTER_OP(OpDefBuilder("Softmax")
                       .Summary("exp(x) / sum(exp(x)) along `axis`.")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .Attr("axis", AttrType::kInt, IntAttr(-1))
                       .SetShapeFn(SoftmaxShape)
                       .SetCostFn(cost_fns::FlopsPerOutput(5))
                       .SetGradient(GradientFromOutput("SoftmaxGrad", {"axis"})));

}  // namespace
}  // namespace nereid
