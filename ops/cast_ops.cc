// Cast: converts between float32, int32 and int64 (ONNX's Cast of token ids,
// masks and counts). Float to integer truncates toward zero, as ONNX does.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

const std::vector<DataType> kCastTypes = {DT_FLOAT, DT_INT32, DT_INT64};

bool Castable(DataType t) { return std::find(kCastTypes.begin(), kCastTypes.end(), t) != kCastTypes.end(); }

absl::StatusOr<std::vector<ShapeAndType>> CastShape(const InferenceContext& c) {
  const DataType to = c.GetType("to");
  if (!Castable(to)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'to' is ", DataTypeName(to),
                                                   "; Cast converts between float32, int32 and int64"));
  }
  return shape_fns::Single(c.input_shape(0), to);
}

// A float-to-float Cast passes the gradient through; through an integer
// there is none (an integer has no derivative).
absl::StatusOr<GradResult> CastGradient(GradientBuilder& g) {
  const DataType from = g.input(0).node->outputs()[g.input(0).port].dtype;
  if (from != DT_FLOAT || g.attr("to").type() != DT_FLOAT) return GradResult{std::nullopt};
  return PassThroughGradient(g);
}

NEREID_REGISTER_OP(OpDefBuilder("Cast")
                       .Summary("x converted to `to` (float32, int32, int64); float to integer truncates toward "
                                "zero.")
                       .Input("x", kCastTypes)
                       .Output("y")
                       .RequiredAttr("to", AttrType::kType)
                       .SetShapeFn(CastShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(CastGradient));

}  // namespace
}  // namespace nereid
