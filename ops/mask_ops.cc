// CausalMask: attention scores [..., Tq, Tk] with every key after its query
// replaced by `value` (-inf before a softmax), so position q attends to keys
// 0 .. q + Tk - Tq only (a decoder's self-attention; with Tk > Tq the
// queries are the last Tq positions). Additive masks (padding) are an Add.
// Its gradient is the same op with value 0: dy where the score was kept.

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> CausalMaskShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0),
                                                   " must be scores [..., queries, keys]"));
  }
  const int64_t queries = x.dim(x.rank() - 2), keys = x.dim(x.rank() - 1);
  if (queries >= 0 && keys >= 0 && queries > keys) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0), " has more queries (", queries,
                                                   ") than keys (", keys, ")"));
  }
  if (std::isnan(c.GetFloat("value"))) return absl::InvalidArgumentError("attribute 'value' is NaN");
  return shape_fns::UnchangedShape(c);
}

absl::StatusOr<GradResult> CausalMaskGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "CausalMask", {dy}, {{"value", FloatAttr(0.0f)}}));
  return GradResult{dx};
}

NEREID_REGISTER_OP(OpDefBuilder("CausalMask")
                       .Summary("Scores [..., Tq, Tk] with key k > q + Tk - Tq set to `value` (-inf: a decoder's "
                                "causal attention before its softmax).")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .Attr("value", AttrType::kFloat, FloatAttr(-std::numeric_limits<float>::infinity()))
                       .SetShapeFn(CausalMaskShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(CausalMaskGradient));

}  // namespace
}  // namespace nereid
