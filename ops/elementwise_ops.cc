// Binary elementwise arithmetic with NumPy broadcasting.

#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> BinaryShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, 1));
  ASSIGN_OR_RETURN(TensorShape out, shape_fns::Broadcast(c.input_shape(0), c.input_shape(1)));
  return shape_fns::Single(std::move(out), c.input_dtype(0));
}

OpDefBuilder Binary(const char* name, const char* summary) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("a", kFloatTypes)
      .Input("b", kFloatTypes)
      .Output("y")
      .SetShapeFn(BinaryShape)
      .SetCostFn(cost_fns::OneFlopPerOutput);
}

NEREID_REGISTER_OP(Binary("Add", "a + b, elementwise, with broadcasting."));
NEREID_REGISTER_OP(Binary("Mul", "a * b, elementwise, with broadcasting."));

}  // namespace
}  // namespace nereid
