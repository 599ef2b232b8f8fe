// Binary elementwise arithmetic with NumPy broadcasting: +, -, *, /, ^; and
// Where, the broadcasting choice between two values.

#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> BinaryShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, 1));
  ASSIGN_OR_RETURN(TensorShape out, shape_fns::Broadcast(c.input_shape(0), c.input_shape(1)));
  return shape_fns::Single(std::move(out), c.input_dtype(0));
}

// A broadcast input's gradient is the output gradient summed over the
// dimensions it was broadcast along.
absl::StatusOr<GradResult> AddGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut da, g.Add("a", "ReduceToShapeOf", {dy, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut db, g.Add("b", "ReduceToShapeOf", {dy, g.input(1)}));
  return GradResult{da, db};
}

absl::StatusOr<GradResult> SubGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut minus_dy, g.Add("minus_dy", "Neg", {dy}));
  ASSIGN_OR_RETURN(NodeOut da, g.Add("a", "ReduceToShapeOf", {dy, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut db, g.Add("b", "ReduceToShapeOf", {minus_dy, g.input(1)}));
  return GradResult{da, db};
}

absl::StatusOr<GradResult> MulGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dy_b, g.Add("dy_times_b", "Mul", {dy, g.input(1)}));
  ASSIGN_OR_RETURN(NodeOut dy_a, g.Add("dy_times_a", "Mul", {dy, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut da, g.Add("a", "ReduceToShapeOf", {dy_b, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut db, g.Add("b", "ReduceToShapeOf", {dy_a, g.input(1)}));
  return GradResult{da, db};
}

// y = a / b: da = dy / b, db = -dy * y / b.
absl::StatusOr<GradResult> DivGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dy_over_b, g.Add("dy_over_b", "Div", {dy, g.input(1)}));
  ASSIGN_OR_RETURN(NodeOut db_full, g.Add("db_full", "DivGradDivisor", {dy, g.output(0), g.input(1)}));
  ASSIGN_OR_RETURN(NodeOut da, g.Add("a", "ReduceToShapeOf", {dy_over_b, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut db, g.Add("b", "ReduceToShapeOf", {db_full, g.input(1)}));
  return GradResult{da, db};
}

// y = a^b: da = dy * b * a^(b-1), db = dy * y * log(a) (pruned when b is a
// constant, as in PyTorch's x.pow(2)).
absl::StatusOr<GradResult> PowGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut da_full, g.Add("da_full", "PowGradBase", {dy, g.input(0), g.input(1)}));
  ASSIGN_OR_RETURN(NodeOut db_full, g.Add("db_full", "PowGradExponent", {dy, g.input(0), g.output(0)}));
  ASSIGN_OR_RETURN(NodeOut da, g.Add("a", "ReduceToShapeOf", {da_full, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut db, g.Add("b", "ReduceToShapeOf", {db_full, g.input(1)}));
  return GradResult{da, db};
}

absl::StatusOr<std::vector<ShapeAndType>> WhereShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 1, 2));
  ASSIGN_OR_RETURN(TensorShape values, shape_fns::Broadcast(c.input_shape(1), c.input_shape(2)));
  ASSIGN_OR_RETURN(TensorShape out, shape_fns::Broadcast(c.input_shape(0), values));
  return shape_fns::Single(std::move(out), c.input_dtype(1));
}

// dy goes to x where the condition holds and to y elsewhere, each summed back
// over what it was broadcast along; the condition gets none.
absl::StatusOr<GradResult> WhereGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx_full, g.Add("x_full", "WhereGrad", {dy, g.input(0)}, {{"branch", BoolAttr(true)}}));
  ASSIGN_OR_RETURN(NodeOut dy_full, g.Add("y_full", "WhereGrad", {dy, g.input(0)}, {{"branch", BoolAttr(false)}}));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "ReduceToShapeOf", {dx_full, g.input(1)}));
  ASSIGN_OR_RETURN(NodeOut dother, g.Add("y", "ReduceToShapeOf", {dy_full, g.input(2)}));
  return GradResult{std::nullopt, dx, dother};
}

OpDefBuilder Binary(const char* name, const char* summary, GradFn grad) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("a", kFloatTypes)
      .Input("b", kFloatTypes)
      .Output("y")
      .SetShapeFn(BinaryShape)
      .SetCostFn(cost_fns::OneFlopPerOutput)
      .SetGradient(std::move(grad));
}

NEREID_REGISTER_OP(Binary("Add", "a + b, elementwise, with broadcasting.", AddGradient));
NEREID_REGISTER_OP(Binary("Sub", "a - b, elementwise, with broadcasting.", SubGradient));
NEREID_REGISTER_OP(Binary("Mul", "a * b, elementwise, with broadcasting.", MulGradient));
NEREID_REGISTER_OP(Binary("Div", "a / b, elementwise, with broadcasting.", DivGradient));
NEREID_REGISTER_OP(Binary("Pow", "a ^ b, elementwise, with broadcasting.", PowGradient));
// Three-input gradient pieces, broadcast to dy's shape (summed back by
// ReduceToShapeOf).
NEREID_REGISTER_OP(GradientOp("DivGradDivisor", "-dy * y / b.", {"dy", "y", "b"}, 0));
NEREID_REGISTER_OP(GradientOp("PowGradBase", "dy * b * a^(b - 1).", {"dy", "a", "b"}, 0));
NEREID_REGISTER_OP(GradientOp("PowGradExponent", "dy * y * log(a).", {"dy", "a", "y"}, 0));
NEREID_REGISTER_OP(OpDefBuilder("Where")
                       .Summary("x where condition is non-zero, else y, elementwise, with broadcasting (a mask "
                                "filling attention scores).")
                       .Input("condition", kFloatTypes)
                       .Input("x", kFloatTypes)
                       .Input("y", kFloatTypes)
                       .Output("out")
                       .SetShapeFn(WhereShape)
                       .SetCostFn(cost_fns::OneFlopPerOutput)
                       .SetGradient(WhereGradient));
NEREID_REGISTER_OP(GradientOp("WhereGrad", "dy where the condition is non-zero (branch true), or where it is zero.",
                              {"dy", "condition"}, 0)
                       .RequiredAttr("branch", AttrType::kBool));
NEREID_REGISTER_OP(GradientOp("ReduceToShapeOf", "dy summed over the dimensions along which x was broadcast.",
                              {"dy", "x"}, 1));

}  // namespace
}  // namespace nereid
