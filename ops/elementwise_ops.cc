// Binary elementwise arithmetic with NumPy broadcasting.

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

absl::StatusOr<GradResult> MulGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dy_b, g.Add("dy_times_b", "Mul", {dy, g.input(1)}));
  ASSIGN_OR_RETURN(NodeOut dy_a, g.Add("dy_times_a", "Mul", {dy, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut da, g.Add("a", "ReduceToShapeOf", {dy_b, g.input(0)}));
  ASSIGN_OR_RETURN(NodeOut db, g.Add("b", "ReduceToShapeOf", {dy_a, g.input(1)}));
  return GradResult{da, db};
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
NEREID_REGISTER_OP(Binary("Mul", "a * b, elementwise, with broadcasting.", MulGradient));
NEREID_REGISTER_OP(OpDefBuilder("Div")
                       .Summary("a / b, elementwise, with broadcasting (no gradient: for passes after autodiff).")
                       .Input("a", kFloatTypes)
                       .Input("b", kFloatTypes)
                       .Output("y")
                       .SetShapeFn(BinaryShape)
                       .SetCostFn(cost_fns::OneFlopPerOutput)
                       .NoGradient("inserted after autodiff (gossip's de-biasing x / w)"));
NEREID_REGISTER_OP(GradientOp("ReduceToShapeOf", "dy summed over the dimensions along which x was broadcast.",
                              {"dy", "x"}, 1));

}  // namespace
}  // namespace nereid
