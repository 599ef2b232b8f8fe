// Batch and layer normalisation, and dropout.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
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
  TensorShape channels({x.dim(1)});
  DataType t = c.input_dtype(0);
  return std::vector<ShapeAndType>{{x, t}, {channels, t}, {channels, t}, {channels, t}, {channels, t}};
}

// dx, dscale, doffset from one BatchNormGrad node (outputs 0, 1, 2); the
// running statistics get none.
absl::StatusOr<GradResult> BatchNormGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "BatchNormGrad",
                                                {dy, g.input(0), g.input(1), g.output(1), g.output(2)},
                                                {"epsilon"}));
  return GradResult{dx, NodeOut{dx.node, 1}, NodeOut{dx.node, 2}, std::nullopt, std::nullopt};
}

absl::StatusOr<std::vector<ShapeAndType>> BatchNormGradShape(const InferenceContext& c) {
  TensorShape channels({c.input_shape(2).dim(0)});
  DataType t = c.input_dtype(0);
  return std::vector<ShapeAndType>{{c.input_shape(1), t}, {channels, t}, {channels, t}};
}

// x [d0, .., d(axis), .., d(r-1)] normalised over dimensions axis..r-1;
// scale and bias have those dimensions; mean and rstd keep x's rank with 1s
// there (as ONNX's LayerNormalization outputs them).
absl::StatusOr<std::vector<ShapeAndType>> LayerNormShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  ASSIGN_OR_RETURN(const int axis, shape_fns::AxisAttr(c, "axis"));
  if (c.GetFloat("epsilon") <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'epsilon' must be > 0, got ", c.GetFloat("epsilon")));
  }
  std::vector<int64_t> normalized(x.dims().begin() + axis, x.dims().end());
  for (int i = 1; i < 3; ++i) {
    RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, i));
    const TensorShape& p = c.input_shape(i);
    bool agree = p.rank() == static_cast<int>(normalized.size());
    for (int d = 0; agree && d < p.rank(); ++d) agree = shape_fns::DimsAgree(p.dim(d), normalized[d]);
    if (!agree) {
      return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, i), " must have the normalised dims (",
                                                     axis, "..) of ", shape_fns::DescribeInput(c, 0)));
    }
  }
  std::vector<int64_t> stats(x.dims().begin(), x.dims().begin() + axis);
  stats.resize(x.rank(), 1);
  DataType t = c.input_dtype(0);
  return std::vector<ShapeAndType>{{x, t}, {TensorShape(stats), t}, {TensorShape(stats), t}};
}

absl::StatusOr<GradResult> LayerNormGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "LayerNormGrad",
                                                {dy, g.input(0), g.input(1), g.output(1), g.output(2)}, {"axis"}));
  return GradResult{dx, NodeOut{dx.node, 1}, NodeOut{dx.node, 2}};
}

absl::StatusOr<std::vector<ShapeAndType>> LayerNormGradShape(const InferenceContext& c) {
  DataType t = c.input_dtype(0);
  return std::vector<ShapeAndType>{{c.input_shape(1), t}, {c.input_shape(2), t}, {c.input_shape(2), t}};
}

absl::StatusOr<GradResult> DropoutGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "DropoutGrad", {dy}, {"rate", "seed"}));
  return GradResult{dx};
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
                       .Output("saved_mean")
                       .Output("saved_var")
                       .Output("next_running_mean")
                       .Output("next_running_var")
                       .Attr("epsilon", AttrType::kFloat, FloatAttr(1e-5f))
                       .Attr("momentum", AttrType::kFloat, FloatAttr(0.1f),
                             "weight of the batch statistics in the running update")
                       .UpdatesState(3, 3)
                       .UpdatesState(4, 4)
                       .SetShapeFn(BatchNormShape)
                       .SetCostFn(cost_fns::FlopsPerOutput(4))
                       .SetGradient(BatchNormGradient));

NEREID_REGISTER_OP(OpDefBuilder("BatchNormGrad")
                       .Summary("Gradients of training-mode BatchNorm: dx, dscale, doffset.")
                       .Input("dy", kFloatTypes)
                       .Input("x", kFloatTypes)
                       .Input("scale", kFloatTypes)
                       .Input("saved_mean", kFloatTypes)
                       .Input("saved_var", kFloatTypes)
                       .Output("dx")
                       .Output("dscale")
                       .Output("doffset")
                       .Attr("epsilon", AttrType::kFloat, FloatAttr(1e-5f))
                       .NoGradient("a gradient op (no second derivatives)")
                       .SetShapeFn(BatchNormGradShape)
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("LayerNorm")
                       .Summary("Normalises x over dimensions axis.. (mean 0, variance 1 within each), then "
                                "scale * x_hat + bias; also outputs the mean and 1/sqrt(var + epsilon).")
                       .Input("x", kFloatTypes)
                       .Input("scale", kFloatTypes)
                       .Input("bias", kFloatTypes)
                       .Output("y")
                       .Output("mean")
                       .Output("rstd")
                       .Attr("axis", AttrType::kInt, IntAttr(-1))
                       .Attr("epsilon", AttrType::kFloat, FloatAttr(1e-5f))
                       .SetShapeFn(LayerNormShape)
                       .SetCostFn(cost_fns::FlopsPerOutput(8))
                       .SetGradient(LayerNormGradient));

NEREID_REGISTER_OP(OpDefBuilder("LayerNormGrad")
                       .Summary("Gradients of LayerNorm: dx, dscale, dbias.")
                       .Input("dy", kFloatTypes)
                       .Input("x", kFloatTypes)
                       .Input("scale", kFloatTypes)
                       .Input("mean", kFloatTypes)
                       .Input("rstd", kFloatTypes)
                       .Output("dx")
                       .Output("dscale")
                       .Output("dbias")
                       .Attr("axis", AttrType::kInt, IntAttr(-1))
                       .NoGradient("a gradient op (no second derivatives)")
                       .SetShapeFn(LayerNormGradShape)
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("Dropout")
                       .Summary("While training, zeroes each element with probability `rate` and scales "
                                "the rest by 1/(1-rate); identity otherwise.")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .Attr("rate", AttrType::kFloat, FloatAttr(0.5f))
                       .Attr("seed", AttrType::kInt, IntAttr(0))
                       .SetShapeFn(DropoutShape)
                       .SetCostFn(cost_fns::FlopsPerOutput(2))
                       .SetGradient(DropoutGradient));

NEREID_REGISTER_OP(GradientOp("DropoutGrad",
                              "dy through the same mask Dropout drew at this step (regenerated from the seed "
                              "and the step, not stored).",
                              {"dy"}, 0)
                       .Attr("rate", AttrType::kFloat, FloatAttr(0.5f))
                       .Attr("seed", AttrType::kInt, IntAttr(0)));

}  // namespace
}  // namespace nereid
