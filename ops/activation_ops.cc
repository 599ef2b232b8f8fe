// Elementwise nonlinearities (ReLU and its bounded forms, the sigmoids, GELU)
// and softmax / log-softmax along an axis.

#include <cfloat>

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

NEREID_REGISTER_OP(UnaryOp("Relu", "max(x, 0), elementwise.", 1, GradientThroughOutput("ReluGrad")));
NEREID_REGISTER_OP(UnaryOp("Sigmoid", "1 / (1 + exp(-x)), elementwise.", 4, GradientThroughOutput("SigmoidGrad")));
NEREID_REGISTER_OP(UnaryOp("Tanh", "tanh(x), elementwise.", 4, GradientThroughOutput("TanhGrad")));
NEREID_REGISTER_OP(UnaryOp("Gelu", "x * Phi(x) (erf), or its tanh approximation, elementwise.", 8,
                           GradientThroughInput("GeluGrad", {"approximate"}))
                       .EnumAttr("approximate", {"none", "tanh"}, "none", "PyTorch's and ONNX's two forms"));
NEREID_REGISTER_OP(UnaryOp("Clip", "min(max(x, min), max), elementwise (ReLU6: min 0, max 6).", 2,
                           GradientThroughInput("ClipGrad", {"min", "max"}))
                       .Attr("min", AttrType::kFloat, FloatAttr(-FLT_MAX))
                       .Attr("max", AttrType::kFloat, FloatAttr(FLT_MAX)));
NEREID_REGISTER_OP(UnaryOp("HardSigmoid", "max(0, min(1, alpha * x + beta)), elementwise.", 3,
                           GradientThroughInput("HardSigmoidGrad", {"alpha", "beta"}))
                       .Attr("alpha", AttrType::kFloat, FloatAttr(0.2f))
                       .Attr("beta", AttrType::kFloat, FloatAttr(0.5f)));
NEREID_REGISTER_OP(UnaryOp("HardSwish", "x * max(0, min(1, x / 6 + 1 / 2)), elementwise.", 4,
                           GradientThroughInput("HardSwishGrad")));

NEREID_REGISTER_OP(GradientOp("ReluGrad", "dy where y > 0, else 0.", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("SigmoidGrad", "dy * y * (1 - y).", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("TanhGrad", "dy * (1 - y^2).", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("GeluGrad", "dy * d/dx GELU(x).", {"dy", "x"}, 0)
                       .EnumAttr("approximate", {"none", "tanh"}, "none"));
NEREID_REGISTER_OP(GradientOp("ClipGrad", "dy where min < x < max, else 0.", {"dy", "x"}, 0)
                       .Attr("min", AttrType::kFloat, FloatAttr(-FLT_MAX))
                       .Attr("max", AttrType::kFloat, FloatAttr(FLT_MAX)));
NEREID_REGISTER_OP(GradientOp("HardSigmoidGrad", "dy * alpha where 0 < alpha * x + beta < 1, else 0.", {"dy", "x"}, 0)
                       .Attr("alpha", AttrType::kFloat, FloatAttr(0.2f))
                       .Attr("beta", AttrType::kFloat, FloatAttr(0.5f)));
NEREID_REGISTER_OP(GradientOp("HardSwishGrad", "dy * d/dx HardSwish(x).", {"dy", "x"}, 0));
NEREID_REGISTER_OP(GradientOp("SoftmaxGrad", "y * (dy - sum(dy * y)) along `axis`.", {"dy", "y"}, 0)
                       .Attr("axis", AttrType::kInt, IntAttr(-1)));
NEREID_REGISTER_OP(GradientOp("LogSoftmaxGrad", "dy - exp(y) * sum(dy) along `axis`.", {"dy", "y"}, 0)
                       .Attr("axis", AttrType::kInt, IntAttr(-1)));

absl::StatusOr<std::vector<ShapeAndType>> SoftmaxShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::AxisAttr(c, "axis").status());
  return shape_fns::UnchangedShape(c);
}

OpDefBuilder SoftmaxOp(const char* name, const char* summary, const char* grad_op) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Output("y")
      .Attr("axis", AttrType::kInt, IntAttr(-1))
      .SetShapeFn(SoftmaxShape)
      .SetCostFn(cost_fns::FlopsPerOutput(5))
      .SetGradient(GradientThroughOutput(grad_op, {"axis"}));
}

NEREID_REGISTER_OP(SoftmaxOp("Softmax", "exp(x) / sum(exp(x)) along `axis`.", "SoftmaxGrad"));
NEREID_REGISTER_OP(SoftmaxOp("LogSoftmax", "x - log(sum(exp(x))) along `axis`.", "LogSoftmaxGrad"));

}  // namespace
}  // namespace nereid
