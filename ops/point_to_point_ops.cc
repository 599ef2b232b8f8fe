// Point-to-point communication between placed parts of a plan
// (graph/placement.h): a Send on one rank and its Recv on another.
//
// In the whole plan the Recv reads the Send's output through an ordinary
// edge, so the plan is one dataflow graph: it runs unchanged in one process
// (both nodes are identities there), and autodiff derives the backward
// transfer: the gradient of a Recv is a Send on the receiver's rank and a
// Recv on the sender's, carrying the gradient back. Each rank runs its own
// part (plan/split_by_rank.h, ProjectForRank); there the edge is cut and each
// end learns its peer (`peer`), and the Recv's output shape comes with the
// message. Pairs are numbered (`channel`) after every pass, like the group
// collectives, so a transfer's tag is the same on both ends.

#include "absl/strings/str_cat.h"
#include "graph/placement.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

// Both ends: the pair's number, the rank at the other end once the plan is
// cut per rank (-1: the other end is in the same process), and whether
// evaluation runs the transfer (it feeds the logits or the loss).
OpDefBuilder PointToPointOp(const char* name, const char* summary) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Output("y")
      .Attr("channel", AttrType::kInt, IntAttr(-1), "the pair's number (set when the plan is finished)")
      .Attr("peer", AttrType::kInt, IntAttr(-1), "the rank at the other end (set when the plan is cut per rank)")
      .Attr("eval", AttrType::kBool, BoolAttr(false), "evaluation runs the transfer (set with the channel)")
      .Attr("phase", AttrType::kInt, IntAttr(0),
            "where the transfer goes in a rank's issue order on a device: by phase, then channel (a pass that "
            "numbers its own channels puts a transfer that waits on others of a step in a later phase)")
      .Communicates()
      .SetCostFn(cost_fns::NoFlops);
}

AttrValue ScalarShapeAttr() {
  AttrValue v;
  v.mutable_shape();
  return v;
}

// A Recv reads its Send (the whole plan) or nothing (one rank's part: the
// value arrives from `peer` with its shape; only the trailing dims are known).
absl::StatusOr<std::vector<ShapeAndType>> RecvShape(const InferenceContext& c) {
  if (c.num_inputs() > 1) return absl::InvalidArgumentError("a Recv reads at most one Send");
  if (c.num_inputs() == 1) return shape_fns::UnchangedShape(c);
  if (c.GetInt("peer") < 0) return absl::InvalidArgumentError("a Recv without its Send needs the rank it reads from (peer)");
  ASSIGN_OR_RETURN(TensorShape shape, TensorShape::FromProto(c.GetShape("shape")));
  return shape_fns::Single(std::move(shape), DT_FLOAT);
}

// The gradient goes back the way the value came: a Send where the Recv runs,
// a Recv where the Send runs.
absl::StatusOr<GradResult> RecvGradient(GradientBuilder& g) {
  if (g.node().num_inputs() != 1) {
    return absl::FailedPreconditionError("differentiate the whole plan, before it is cut per rank");
  }
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut send, g.Add("send", "Send", {dy}));
  SetPlacement(*send.node, PlacementOf(g.node()));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "Recv", {send}));
  SetPlacement(*dx.node, PlacementOf(*g.input(0).node));
  return GradResult{dx};
}

NEREID_REGISTER_OP(PointToPointOp("Send", "Sends x to the rank of its Recv; y = x (what the Recv reads in the "
                                          "whole plan). Gradient: the Recv's gradient, received back.")
                       .Input("x", {DT_FLOAT})
                       .SetShapeFn(shape_fns::UnchangedShape)
                       .SetGradient(PassThroughGradient));

NEREID_REGISTER_OP(PointToPointOp("Recv", "y = the x of its Send, received from the Send's rank. Gradient: sent "
                                          "back to the Send's rank.")
                       .InputList("x", 0, {DT_FLOAT})
                       .Attr("shape", AttrType::kShape, ScalarShapeAttr(),
                             "the value's shape (-1: sent with it), when the plan is cut per rank")
                       .SetShapeFn(RecvShape)
                       .SetGradient(RecvGradient));

}  // namespace
}  // namespace nereid
