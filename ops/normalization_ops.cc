// Batch normalisation and dropout.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> BatchNormShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape_fns::DescribeInput(c, 0), " must have rank >= 2 (batch, channels, ...)"));
  }
  for (int i = 1; i < 5; ++i) {
    RETURN_IF_ERROR(shape_fns::RequireRank(c, i, 1, "one value per channel"));
    RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, i));
    if (!shape_fns::DimsAgree(c.input_shape(i).dim(0), x.dim(1))) {
      return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, i),
                                                     " does not match the channels of ",
                                                     shape_fns::DescribeInput(c, 0)));
    }
  }
  if (c.GetFloat("epsilon") <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'epsilon' must be > 0, got ", c.GetFloat("epsilon")));
  }
  float momentum = c.GetFloat("momentum");
  if (momentum < 0 || momentum > 1) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'momentum' must be in [0, 1], got ", momentum));
  }
  return shape_fns::UnchangedShape(c);
}

absl::StatusOr<std::vector<ShapeAndType>> DropoutShape(const InferenceContext& c) {
  float rate = c.GetFloat("rate");
  if (!(rate >= 0 && rate < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'rate' must be in [0, 1), got ", rate));
  }
  return shape_fns::UnchangedShape(c);
}

NEREID_REGISTER_OP(OpDefBuilder("BatchNorm")
                       .Summary("Normalises each channel (dimension 1) by batch statistics while training, "
                                "running statistics otherwise; then scale * x_hat + offset.")
                       .Input("x", kFloatTypes)
                       .Input("scale", kFloatTypes)
                       .Input("offset", kFloatTypes)
                       .Input("running_mean", kFloatTypes)
                       .Input("running_var", kFloatTypes)
                       .Output("y")
                       .Attr("epsilon", AttrType::kFloat, FloatAttr(1e-5f))
                       .Attr("momentum", AttrType::kFloat, FloatAttr(0.1f),
                             "weight of the batch statistics in the running update")
                       .SetShapeFn(BatchNormShape)
                       .SetCostFn(cost_fns::FlopsPerOutput(4)));

NEREID_REGISTER_OP(OpDefBuilder("Dropout")
                       .Summary("While training, zeroes each element with probability `rate` and scales "
                                "the rest by 1/(1-rate); identity otherwise.")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .Attr("rate", AttrType::kFloat, FloatAttr(0.5f))
                       .Attr("seed", AttrType::kInt, IntAttr(0))
                       .SetShapeFn(DropoutShape)
                       .SetCostFn(cost_fns::FlopsPerOutput(2)));

}  // namespace
}  // namespace nereid
