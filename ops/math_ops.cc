// Elementwise arithmetic of one input: square root, reciprocal, exp, log,
// negation and erf (the pieces PyTorch's exports build LayerNorm and GELU
// from).

#include "ops/gradient_builder.h"
#include "ops/op_registry.h"

namespace nereid {
namespace {

absl::StatusOr<GradResult> NegGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "Neg", {dy}));
  return GradResult{dx};
}

NEREID_REGISTER_OP(UnaryOp("Sqrt", "sqrt(x), elementwise.", 1, GradientThroughOutput("SqrtGrad")));
NEREID_REGISTER_OP(UnaryOp("Reciprocal", "1 / x, elementwise.", 1, GradientThroughOutput("ReciprocalGrad")));
NEREID_REGISTER_OP(UnaryOp("Exp", "exp(x), elementwise.", 4, GradientThroughOutput("ExpGrad")));
NEREID_REGISTER_OP(UnaryOp("Log", "log(x), elementwise.", 4, GradientThroughInput("LogGrad")));
NEREID_REGISTER_OP(UnaryOp("Neg", "-x, elementwise.", 1, NegGradient));
NEREID_REGISTER_OP(UnaryOp("Erf", "The error function, elementwise.", 8, GradientThroughInput("ErfGrad")));

NEREID_REGISTER_OP(GradientOp("SqrtGrad", "dy / (2 y).", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("ReciprocalGrad", "-dy * y^2.", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("ExpGrad", "dy * y.", {"dy", "y"}, 0));
NEREID_REGISTER_OP(GradientOp("LogGrad", "dy / x.", {"dy", "x"}, 0));
NEREID_REGISTER_OP(GradientOp("ErfGrad", "dy * 2 / sqrt(pi) * exp(-x^2).", {"dy", "x"}, 0));

}  // namespace
}  // namespace nereid
