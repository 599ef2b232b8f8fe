// Spatial pooling over NCHW input: max, average, and global average.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
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

const std::vector<std::string> kPoolAttrs = {"ksize", "strides", "padding", "pads"};
const std::vector<std::string> kAvgPoolAttrs = {"ksize", "strides", "padding", "pads", "count_padding"};

OpDefBuilder& AddPoolAttrs(OpDefBuilder& b) {
  return b.RequiredAttr("ksize", AttrType::kIntList, "window height, width")
      .Attr("strides", AttrType::kIntList, IntListAttr({1, 1}))
      .EnumAttr("padding", {"VALID", "SAME", "EXPLICIT"}, "VALID")
      .Attr("pads", AttrType::kIntList, IntListAttr({}), "top, bottom, left, right; with padding EXPLICIT");
}

// dx = PoolGrad(x, dy): the max pool's gradient recomputes which element won
// each window from x rather than keeping a workspace alive between passes.
GradFn PoolGradient(const char* grad_op, const std::vector<std::string>& attrs) {
  return [grad_op, attrs](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", grad_op, {g.input(0), dy}, attrs));
    return GradResult{dx};
  };
}

// The average's divisor: the window's elements inside the image (false), or
// the whole window, zeros of the padding included (ONNX's count_include_pad).
OpDefBuilder& AddCountPadding(OpDefBuilder& b) {
  return b.Attr("count_padding", AttrType::kBool, BoolAttr(false),
                "divide by the whole window, padding included (default: only the elements inside)");
}

OpDefBuilder Pool(const char* name, const char* summary, const char* grad_op, bool average) {
  OpDefBuilder b(name);
  b.Summary(summary).Input("x", kFloatTypes).Output("y");
  AddPoolAttrs(b);
  if (average) AddCountPadding(b);
  return b.SetShapeFn(PoolShape).SetCostFn(PoolCost).SetGradient(
      PoolGradient(grad_op, average ? kAvgPoolAttrs : kPoolAttrs));
}

OpDefBuilder PoolGradOp(const char* name, const char* summary, bool average) {
  OpDefBuilder b = GradientOp(name, summary, {"x", "dy"}, 0);
  AddPoolAttrs(b);
  if (average) AddCountPadding(b);
  return b;
}

NEREID_REGISTER_OP(Pool("MaxPool", "Maximum over each window (NCHW).", "MaxPoolGrad", false));
NEREID_REGISTER_OP(Pool("AvgPool", "Mean over each window (NCHW); padding is not counted unless count_padding.",
                        "AvgPoolGrad", true));
NEREID_REGISTER_OP(PoolGradOp("MaxPoolGrad", "Routes dy to the maximum of each window of x.", false));
NEREID_REGISTER_OP(PoolGradOp("AvgPoolGrad", "Spreads dy evenly over each window of x.", true));
NEREID_REGISTER_OP(GradientOp("GlobalAvgPoolGrad", "Spreads dy [N,C] evenly over x's height and width.",
                              {"x", "dy"}, 0));

absl::StatusOr<GradResult> GlobalAvgPoolGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "GlobalAvgPoolGrad", {g.input(0), dy}));
  return GradResult{dx};
}

NEREID_REGISTER_OP(OpDefBuilder("GlobalAvgPool")
                       .Summary("Mean over height and width: [N,C,H,W] -> [N,C].")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .SetShapeFn(GlobalAvgPoolShape)
                       .SetCostFn(GlobalAvgPoolCost)
                       .SetGradient(GlobalAvgPoolGradient));

}  // namespace
}  // namespace nereid
