// Ops the training passes add: gradient accumulation, the gradient marker
// the optimizer and communication passes look for, learning-rate schedules,
// and the optimizer updates. Updates are functional (they output the next
// parameter and state values, which Feedback nodes carry to the next step),
// so a parameter's every version is an ordinary dataflow value.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> AddNShape(const InferenceContext& c) {
  for (int i = 1; i < c.num_inputs(); ++i) {
    RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, i));
    if (c.input_shape(i).rank() != c.input_shape(0).rank()) {
      return absl::InvalidArgumentError(absl::StrCat("shapes disagree: ", shape_fns::DescribeInput(c, 0), " vs ",
                                                     shape_fns::DescribeInput(c, i)));
    }
  }
  return shape_fns::UnchangedShape(c);
}

absl::StatusOr<GradResult> AddNGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  return GradResult(g.node().num_inputs(), dy);
}

// Shape of the parameter (input 0) for every output.
absl::StatusOr<std::vector<ShapeAndType>> UpdateShape(const InferenceContext& c, int num_outputs) {
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (i == 2) continue;  // the learning rate, a scalar
    if (c.input_shape(i) != c.input_shape(0)) {
      return absl::InvalidArgumentError(absl::StrCat("shapes disagree: ", shape_fns::DescribeInput(c, 0), " vs ",
                                                     shape_fns::DescribeInput(c, i)));
    }
  }
  if (c.input_shape(2).rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 2), " must be a scalar"));
  }
  return std::vector<ShapeAndType>(num_outputs, {c.input_shape(0), c.input_dtype(0)});
}

NEREID_REGISTER_OP(OpDefBuilder("AddN")
                       .Summary("The sum of its inputs (gradient accumulation where a value fans out); "
                                "summed in input order, so the result does not depend on scheduling.")
                       .InputList("values", 1, kFloatTypes)
                       .Output("y")
                       .SetShapeFn(AddNShape)
                       .SetCostFn(cost_fns::OneFlopPerOutput)
                       .SetGradient(AddNGradient));

NEREID_REGISTER_OP(OpDefBuilder("Gradient")
                       .Summary("Marks the loss gradient of a parameter (y = scale * x): where the optimizer "
                                "and communication passes find gradients.")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .RequiredAttr("parameter", AttrType::kString, "the Parameter node this is the gradient of")
                       .Attr("scale", AttrType::kFloat, FloatAttr(1.0f),
                             "y = scale * x: the parameter's gradient_scale (sharded parameters)")
                       .NoGradient("gradients of gradients are not supported")
                       .SetShapeFn(shape_fns::UnchangedShape)
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("LearningRate")
                       .Summary("The learning rate at the current step: base, times the schedule, times a "
                                "linear warm-up over the first warmup_epochs.")
                       .Output("lr")
                       .RequiredAttr("base", AttrType::kFloat)
                       .EnumAttr("schedule", {"constant", "step", "cosine"}, "constant")
                       .Attr("step_epochs", AttrType::kInt, IntAttr(30), "step: multiply by gamma every this many epochs")
                       .Attr("gamma", AttrType::kFloat, FloatAttr(0.1f), "step: the factor")
                       .Attr("warmup_epochs", AttrType::kFloat, FloatAttr(0.0f), "linear warm-up length (fractional)")
                       .Attr("min_lr", AttrType::kFloat, FloatAttr(0.0f), "cosine: the final rate")
                       .NoGradient("a schedule, not a function of the loss")
                       .SetShapeFn([](const InferenceContext& c) -> absl::StatusOr<std::vector<ShapeAndType>> {
                         if (c.GetFloat("base") < 0 || c.GetFloat("warmup_epochs") < 0 || c.GetInt("step_epochs") < 1) {
                           return absl::InvalidArgumentError(
                               "base and warmup_epochs must be >= 0 and step_epochs >= 1");
                         }
                         return shape_fns::Single(TensorShape(), DT_FLOAT);
                       })
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("ApplySgd")
                       .Summary("SGD with optional momentum (heavy ball or Nesterov) and L2 weight decay: "
                                "g' = g + wd*p; v' = m*v + g'; p' = p - lr*(nesterov ? g' + m*v' : v'). "
                                "Without a velocity input (momentum 0), p' = p - lr*g' and output 1 = p'.")
                       .Input("param", kFloatTypes)
                       .Input("grad", kFloatTypes)
                       .Input("lr", kFloatTypes)
                       .InputList("velocity", 0, kFloatTypes)
                       .Output("next_param")
                       .Output("next_velocity")
                       .Attr("momentum", AttrType::kFloat, FloatAttr(0.0f))
                       .Attr("nesterov", AttrType::kBool, BoolAttr(false))
                       .Attr("weight_decay", AttrType::kFloat, FloatAttr(0.0f))
                       .NoGradient("an optimizer update")
                       .Elementwise()
                       .SetShapeFn([](const InferenceContext& c) { return UpdateShape(c, 2); })
                       // Costs are per sample; an update's work is per step,
                       // whatever the batch.
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("ApplyAdam")
                       .Summary("Adam (Kingma & Ba) with bias correction; weight_decay is decoupled "
                                "(AdamW) when `decoupled`, else added to the gradient.")
                       .Input("param", kFloatTypes)
                       .Input("grad", kFloatTypes)
                       .Input("lr", kFloatTypes)
                       .Input("m", kFloatTypes)
                       .Input("v", kFloatTypes)
                       .Output("next_param")
                       .Output("next_m")
                       .Output("next_v")
                       .Attr("beta1", AttrType::kFloat, FloatAttr(0.9f))
                       .Attr("beta2", AttrType::kFloat, FloatAttr(0.999f))
                       .Attr("epsilon", AttrType::kFloat, FloatAttr(1e-8f))
                       .Attr("weight_decay", AttrType::kFloat, FloatAttr(0.0f))
                       .Attr("decoupled", AttrType::kBool, BoolAttr(false))
                       .NoGradient("an optimizer update")
                       .Elementwise()
                       .SetShapeFn([](const InferenceContext& c) { return UpdateShape(c, 3); })
                       .SetCostFn(cost_fns::NoFlops));  // per step, as ApplySgd's

}  // namespace
}  // namespace nereid
