// Losses: each takes per-class scores [..., K] and integer class labels [...]
// (a batch [N, K] and [N], or a batch of sequences [B, T, K] and [B, T]) and
// returns the mean loss over the labelled positions as a scalar; a label equal
// to `ignore_index` (padding) counts in neither the sum nor the mean.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> ClassLossShape(const InferenceContext& c) {
  const TensorShape& logits = c.input_shape(0);
  const TensorShape& labels = c.input_shape(1);
  if (logits.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0),
                                                   " must have rank >= 2 (batch, ..., classes)"));
  }
  if (labels.rank() != logits.rank() - 1) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 1), " must have rank ",
                                                   logits.rank() - 1, ": one class index per row of ",
                                                   shape_fns::DescribeInput(c, 0)));
  }
  for (int d = 0; d < labels.rank(); ++d) {
    if (!shape_fns::DimsAgree(logits.dim(d), labels.dim(d))) {
      return absl::InvalidArgumentError(absl::StrCat(d == 0 ? "batch sizes disagree: " : "dimensions disagree: ",
                                                     shape_fns::DescribeInput(c, 0), " vs ",
                                                     shape_fns::DescribeInput(c, 1)));
    }
  }
  return shape_fns::Single(TensorShape(), c.input_dtype(0));
}

// Per sample: a few operations per class score.
int64_t ClassLossCost(const InferenceContext& c, const std::vector<ShapeAndType>&) {
  return 4 * c.input_shape(0).KnownElements();
}

// dlogits = LossGrad(logits, labels, dloss); labels get no gradient. An
// ignore_index is copied only when the loss sets one, so plans without it
// stay as they were.
GradFn ClassLossGradient(const char* grad_op, std::vector<std::string> attrs) {
  return [grad_op, attrs](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dloss, g.output_grad(0));
    std::vector<std::string> copied = attrs;
    if (g.node().def().attr().count("ignore_index") > 0) copied.push_back("ignore_index");
    ASSIGN_OR_RETURN(NodeOut dlogits, g.AddWithAttrsOf("logits", grad_op, {g.input(0), g.input(1), dloss}, copied));
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
      .Attr("ignore_index", AttrType::kInt, IntAttr(-100), "a label that marks a row out of the loss (padding)")
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
      .Attr("ignore_index", AttrType::kInt, IntAttr(-100))
      .NoGradient("a gradient op (no second derivatives)")
      .SetShapeFn([](const InferenceContext& c) -> absl::StatusOr<std::vector<ShapeAndType>> {
        return std::vector<ShapeAndType>{{c.input_shape(0), c.input_dtype(0)}};
      })
      .SetCostFn(cost_fns::NoFlops);
  return b;
}

NEREID_REGISTER_OP(ClassLoss("SoftmaxCrossEntropy",
                             "mean over the labelled rows of -log softmax(logits)[label] (multinomial logistic).",
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

NEREID_REGISTER_OP(ClassLossGradOp("SoftmaxCrossEntropyGrad", "dloss * (softmax(logits) - onehot(label)) / labelled rows; 0 on ignored rows."));
NEREID_REGISTER_OP(ClassLossGradOp("HingeLossGrad", "The subgradient of HingeLoss.")
                       .Attr("margin", AttrType::kFloat, FloatAttr(1.0f)));
NEREID_REGISTER_OP(ClassLossGradOp("LogisticLossGrad", "dloss * -y_k * sigmoid(-y_k s_k) / N."));

}  // namespace
}  // namespace nereid
