// Elementwise nonlinearities and softmax.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

OpDefBuilder Unary(const char* name, const char* summary, int64_t flops_per_element) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Output("y")
      .SetShapeFn(shape_fns::UnchangedShape)
      .SetCostFn(cost_fns::FlopsPerOutput(flops_per_element));
}

NEREID_REGISTER_OP(Unary("Relu", "max(x, 0), elementwise.", 1));
NEREID_REGISTER_OP(Unary("Sigmoid", "1 / (1 + exp(-x)), elementwise.", 4));
NEREID_REGISTER_OP(Unary("Tanh", "tanh(x), elementwise.", 4));

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
                       .SetCostFn(cost_fns::FlopsPerOutput(5)));

}  // namespace
}  // namespace nereid
