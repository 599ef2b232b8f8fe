// Losses: each takes per-class scores [N, K] and integer class labels [N] and
// returns the mean loss over the batch as a scalar.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> ClassLossShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 2, "batch, classes"));
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 1, 1, "one class index per sample"));
  if (!shape_fns::DimsAgree(c.input_shape(0).dim(0), c.input_shape(1).dim(0))) {
    return absl::InvalidArgumentError(absl::StrCat("batch sizes disagree: ", shape_fns::DescribeInput(c, 0),
                                                   " vs ", shape_fns::DescribeInput(c, 1)));
  }
  return shape_fns::Single(TensorShape(), c.input_dtype(0));
}

// Per sample: a few operations per class score.
int64_t ClassLossCost(const InferenceContext& c, const std::vector<ShapeAndType>&) {
  return 4 * c.input_shape(0).KnownElements();
}

// dlogits = LossGrad(logits, labels, dloss); labels get no gradient.
GradFn ClassLossGradient(const char* grad_op, std::vector<std::string> attrs) {
  return [grad_op, attrs](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dloss, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dlogits, g.AddWithAttrsOf("logits", grad_op, {g.input(0), g.input(1), dloss}, attrs));
    return GradResult{dlogits, std::nullopt};
  };
}

OpDefBuilder ClassLoss(const char* name, const char* summary, const char* grad_op,
                       std::vector<std::string> attrs = {}) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("logits", kFloatTypes)
      .Input("labels", kIndexTypes)
      .Output("loss")
      .SetShapeFn(ClassLossShape)
      .SetCostFn(ClassLossCost)
      .SetGradient(ClassLossGradient(grad_op, std::move(attrs)));
}

OpDefBuilder ClassLossGradOp(const char* name, const char* summary) {
  OpDefBuilder b(name);
  b.Summary(summary)
      .Input("logits", kFloatTypes)
      .Input("labels", kIndexTypes)
      .Input("dloss", kFloatTypes)
      .Output("dlogits")
      .NoGradient("a gradient op (no second derivatives)")
      .SetShapeFn([](const InferenceContext& c) -> absl::StatusOr<std::vector<ShapeAndType>> {
        return std::vector<ShapeAndType>{{c.input_shape(0), c.input_dtype(0)}};
      })
      .SetCostFn(cost_fns::NoFlops);
  return b;
}

NEREID_REGISTER_OP(ClassLoss("SoftmaxCrossEntropy",
                             "mean over the batch of -log softmax(logits)[label] (multinomial logistic).",
                             "SoftmaxCrossEntropyGrad"));

NEREID_REGISTER_OP(ClassLoss("HingeLoss",
                             "mean over the batch of sum_{k != label} max(0, margin - s[label] + s[k]) "
                             "(multi-class SVM, Weston-Watkins)",
                             "HingeLossGrad", {"margin"})
                       .Attr("margin", AttrType::kFloat, FloatAttr(1.0f)));

NEREID_REGISTER_OP(ClassLoss("LogisticLoss",
                             "mean over the batch of sum_k log(1 + exp(-y_k s_k)), y_k = +1 for the label "
                             "and -1 otherwise (one-vs-rest logistic regression)",
                             "LogisticLossGrad"));

NEREID_REGISTER_OP(ClassLossGradOp("SoftmaxCrossEntropyGrad", "dloss * (softmax(logits) - onehot(label)) / N."));
NEREID_REGISTER_OP(ClassLossGradOp("HingeLossGrad", "The subgradient of HingeLoss.")
                       .Attr("margin", AttrType::kFloat, FloatAttr(1.0f)));
NEREID_REGISTER_OP(ClassLossGradOp("LogisticLossGrad", "dloss * -y_k * sigmoid(-y_k s_k) / N."));

}  // namespace
}  // namespace nereid
