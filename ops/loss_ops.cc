// Losses: each takes per-class scores [N, K] and integer class labels [N] and
// returns the mean loss over the batch as a scalar.

#include "absl/strings/str_cat.h"
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

OpDefBuilder ClassLoss(const char* name, const char* summary) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("logits", kFloatTypes)
      .Input("labels", kIndexTypes)
      .Output("loss")
      .SetShapeFn(ClassLossShape)
      .SetCostFn(ClassLossCost);
}

NEREID_REGISTER_OP(ClassLoss("SoftmaxCrossEntropy",
                             "mean over the batch of -log softmax(logits)[label] (multinomial logistic)."));

NEREID_REGISTER_OP(ClassLoss("HingeLoss",
                             "mean over the batch of sum_{k != label} max(0, margin - s[label] + s[k]) "
                             "(multi-class SVM, Weston-Watkins)")
                       .Attr("margin", AttrType::kFloat, FloatAttr(1.0f)));

NEREID_REGISTER_OP(ClassLoss("LogisticLoss",
                             "mean over the batch of sum_k log(1 + exp(-y_k s_k)), y_k = +1 for the label "
                             "and -1 otherwise (one-vs-rest logistic regression)"));

}  // namespace
}  // namespace nereid
