// 2-D convolution over NCHW input with OIHW filters (stride, padding,
// dilation, groups).

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> Conv2DShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 4, "NCHW"));
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 1, 4, "OIHW filter"));
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, 1));
  const TensorShape& x = c.input_shape(0);
  const TensorShape& f = c.input_shape(1);
  int64_t groups = c.GetInt("groups");
  if (groups < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'groups' must be >= 1, got ", groups));
  }
  if (f.dim(0) % groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape_fns::DescribeInput(c, 1), ": ", f.dim(0), " output channels are not divisible by ",
                     groups, " groups"));
  }
  if (x.dim(1) != kUnknownDim && x.dim(1) != f.dim(1) * groups) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channels disagree: ", shape_fns::DescribeInput(c, 0), " has ", x.dim(1), " channels but ",
        shape_fns::DescribeInput(c, 1), " expects ", f.dim(1), " x ", groups, " group(s)"));
  }
  if (f.dim(2) < 1 || f.dim(3) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 1), " has an empty window"));
  }
  ASSIGN_OR_RETURN(shape_fns::Window w, shape_fns::ReadWindow(c, {f.dim(2), f.dim(3)}));
  ASSIGN_OR_RETURN(int64_t h, shape_fns::WindowOutputSize(c, x.dim(2), 0, w));
  ASSIGN_OR_RETURN(int64_t wd, shape_fns::WindowOutputSize(c, x.dim(3), 1, w));
  return shape_fns::Single(TensorShape({x.dim(0), f.dim(0), h, wd}), c.input_dtype(0));
}

int64_t Conv2DCost(const InferenceContext& c, const std::vector<ShapeAndType>& out) {
  const TensorShape& f = c.input_shape(1);
  // Each tensor holds at most 2^32 elements, so each factor fits; the
  // product may not.
  return cost_fns::SaturatingMul(2 * out[0].shape.KnownElements(), f.dim(1) * f.dim(2) * f.dim(3));
}

// Both gradients take the forward's multiply-adds: each of dy's elements
// meets one filter window (per input channel of its group).
int64_t ConvGradientCost(const InferenceContext& c, const std::vector<ShapeAndType>& out) {
  const TensorShape& f = c.input_shape(1);
  return cost_fns::SaturatingMul(2 * c.input_shape(2).KnownElements(), f.dim(1) * f.dim(2) * f.dim(3));
}

const std::vector<std::string> kConvAttrs = {"strides", "dilations", "padding", "pads", "groups"};

absl::StatusOr<GradResult> Conv2DGrad(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "Conv2DBackpropInput", {g.input(0), g.input(1), dy}, kConvAttrs));
  ASSIGN_OR_RETURN(NodeOut df,
                   g.AddWithAttrsOf("filter", "Conv2DBackpropFilter", {g.input(0), g.input(1), dy}, kConvAttrs));
  return GradResult{dx, df};
}

OpDefBuilder ConvGradientOp(const char* name, const char* summary, int shape_from) {
  return GradientOp(name, summary, {"x", "filter", "dy"}, shape_from)
      .Attr("strides", AttrType::kIntList, IntListAttr({1, 1}))
      .Attr("dilations", AttrType::kIntList, IntListAttr({1, 1}))
      .EnumAttr("padding", {"VALID", "SAME", "EXPLICIT"}, "VALID")
      .Attr("pads", AttrType::kIntList, IntListAttr({}))
      .Attr("groups", AttrType::kInt, IntAttr(1))
      .SetCostFn(ConvGradientCost);
}

NEREID_REGISTER_OP(ConvGradientOp("Conv2DBackpropInput",
                                  "The gradient of Conv2D with respect to its input (x is read for its shape).", 0));
NEREID_REGISTER_OP(ConvGradientOp("Conv2DBackpropFilter", "The gradient of Conv2D with respect to its filter.", 1));

NEREID_REGISTER_OP(OpDefBuilder("Conv2D")
                       .Summary("2-D convolution: NCHW input, OIHW filter (O, C/groups, KH, KW).")
                       .Input("x", kFloatTypes)
                       .Input("filter", kFloatTypes)
                       .Output("y")
                       .Attr("strides", AttrType::kIntList, IntListAttr({1, 1}))
                       .Attr("dilations", AttrType::kIntList, IntListAttr({1, 1}))
                       .EnumAttr("padding", {"VALID", "SAME", "EXPLICIT"}, "VALID")
                       .Attr("pads", AttrType::kIntList, IntListAttr({}),
                             "top, bottom, left, right; with padding EXPLICIT")
                       .Attr("groups", AttrType::kInt, IntAttr(1))
                       .SetShapeFn(Conv2DShape)
                       .SetCostFn(Conv2DCost)
                       .SetGradient(Conv2DGrad));

}  // namespace
}  // namespace nereid
