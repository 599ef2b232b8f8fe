// Dataflow plumbing: Identity, and Feedback, the edge that carries a value
// from iteration t of a loop to iteration t+1 (Naiad's feedback vertex). A
// Feedback node's input is the only kind of edge allowed to close a cycle.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

// A Feedback node is inferred before its input (which lies later in the same
// loop), so its shape comes from attributes; shape inference then checks the
// input against them.
absl::StatusOr<std::vector<ShapeAndType>> FeedbackShape(const InferenceContext& c) {
  if (c.GetString("loop").empty()) {
    return absl::InvalidArgumentError("attribute 'loop' must name the loop scope the feedback belongs to");
  }
  ASSIGN_OR_RETURN(TensorShape shape, TensorShape::FromProto(c.GetShape("shape")));
  return shape_fns::Single(std::move(shape), c.GetType("dtype"));
}

NEREID_REGISTER_OP(OpDefBuilder("Identity")
                       .Summary("y = x.")
                       .Input("x")
                       .Output("y")
                       .SetShapeFn(shape_fns::UnchangedShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(PassThroughGradient));

NEREID_REGISTER_OP(OpDefBuilder("Feedback")
                       .Summary("Carries x from iteration t of `loop` to iteration t+1.")
                       .Input("x")
                       .Output("y")
                       .RequiredAttr("loop", AttrType::kString)
                       .RequiredAttr("shape", AttrType::kShape)
                       .Attr("dtype", AttrType::kType, TypeAttr(DT_FLOAT))
                       .ClosesCycles()
                       .NoGradient("a loop edge: gradients do not flow from one iteration into the last")
                       .SetShapeFn(FeedbackShape)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
