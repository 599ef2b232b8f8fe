// Spatial pooling over NCHW input: max, average, and global average.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> PoolShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 4, "NCHW"));
  const TensorShape& x = c.input_shape(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> ksize, shape_fns::PairAttr(c, "ksize"));
  ASSIGN_OR_RETURN(shape_fns::Window w, shape_fns::ReadWindow(c, ksize));
  ASSIGN_OR_RETURN(int64_t h, shape_fns::WindowOutputSize(c, x.dim(2), 0, w));
  ASSIGN_OR_RETURN(int64_t wd, shape_fns::WindowOutputSize(c, x.dim(3), 1, w));
  return shape_fns::Single(TensorShape({x.dim(0), x.dim(1), h, wd}), c.input_dtype(0));
}

int64_t PoolCost(const InferenceContext& c, const std::vector<ShapeAndType>& out) {
  std::vector<int64_t> k = c.GetIntList("ksize");
  return cost_fns::SaturatingMul(out[0].shape.KnownElements(), cost_fns::SaturatingMul(k[0], k[1]));
}

absl::StatusOr<std::vector<ShapeAndType>> GlobalAvgPoolShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 4, "NCHW"));
  const TensorShape& x = c.input_shape(0);
  return shape_fns::Single(TensorShape({x.dim(0), x.dim(1)}), c.input_dtype(0));
}

int64_t GlobalAvgPoolCost(const InferenceContext& c, const std::vector<ShapeAndType>&) {
  return c.input_shape(0).KnownElements();
}

OpDefBuilder Pool(const char* name, const char* summary) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Output("y")
      .RequiredAttr("ksize", AttrType::kIntList, "window height, width")
      .Attr("strides", AttrType::kIntList, IntListAttr({1, 1}))
      .EnumAttr("padding", {"VALID", "SAME", "EXPLICIT"}, "VALID")
      .Attr("pads", AttrType::kIntList, IntListAttr({}), "top, bottom, left, right; with padding EXPLICIT")
      .SetShapeFn(PoolShape)
      .SetCostFn(PoolCost);
}

NEREID_REGISTER_OP(Pool("MaxPool", "Maximum over each window (NCHW)."));
NEREID_REGISTER_OP(Pool("AvgPool", "Mean over each window (NCHW); padding is not counted."));

NEREID_REGISTER_OP(OpDefBuilder("GlobalAvgPool")
                       .Summary("Mean over height and width: [N,C,H,W] -> [N,C].")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .SetShapeFn(GlobalAvgPoolShape)
                       .SetCostFn(GlobalAvgPoolCost));

}  // namespace
}  // namespace nereid
