// ClipByGlobalNorm's factor: given every gradient, the scale that brings
// their joint L2 norm down to max_norm (1 when it is already at most that),
// as torch.nn.utils.clip_grad_norm_ computes it: min(1, max_norm / (norm +
// 1e-6)). Outputs the factor and the norm (for the log). A non-finite norm
// (a NaN or an overflow in some gradient) is an error naming the first such
// gradient, not a silent NaN update.
//
// SquaredNorm: the sum of squares of its inputs, as a [1] tensor. A model-
// parallel group's shards hold parts of one gradient: the clip pass sums
// their squares over the group (GroupAllReduce) and hands the factor the
// square root, one more value whose square is that sum.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> ClipFactorShape(const InferenceContext& c) {
  if (!(c.GetFloat("max_norm") > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'max_norm' must be > 0, got ", c.GetFloat("max_norm")));
  }
  const TensorShape scalar{std::vector<int64_t>{}};
  return std::vector<ShapeAndType>{{scalar, DT_FLOAT}, {scalar, DT_FLOAT}};
}

NEREID_REGISTER_OP(OpDefBuilder("GlobalNormClipFactor")
                       .Summary("min(1, max_norm / (||values||_2 + 1e-6)) over all the values together, and the norm.")
                       .InputList("values", 1, {DT_FLOAT})
                       .Output("factor")
                       .Output("norm")
                       .RequiredAttr("max_norm", AttrType::kFloat)
                       .NoGradient("applied to gradients, after differentiation")
                       .SetShapeFn(ClipFactorShape)
                       .SetCostFn(cost_fns::NoFlops));

absl::StatusOr<std::vector<ShapeAndType>> SquaredNormShape(const InferenceContext& c) {
  return shape_fns::Single(TensorShape(std::vector<int64_t>{1}), DT_FLOAT);
}

NEREID_REGISTER_OP(OpDefBuilder("SquaredNorm")
                       .Summary("The sum of the squares of every element of every value, as a [1] tensor.")
                       .InputList("values", 1, {DT_FLOAT})
                       .Output("squares")
                       .NoGradient("applied to gradients, after differentiation")
                       .SetShapeFn(SquaredNormShape)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
