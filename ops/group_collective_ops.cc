// Collectives over a process group (the plan's groups, see
// graph/process_groups.h) that a partitioning pass inserts before autodiff:
// each op's gradient is its conjugate collective, so the backward pass's
// communication is derived, not written by hand.
//
//   GroupAllGather      forward: concatenate the members' x along dim 0
//                       backward: reduce-scatter (sum) the gradient along dim 0
//   GroupReduceScatter  forward: sum the members' x, keep this member's block
//                       of dim 0; backward: all-gather the gradient
//   GroupAllReduce      forward: sum over the members; backward: identity
//   GroupIdentity       forward: identity; backward: allreduce (sum)
//   GroupSendRecv       forward: send x to the member `offset` places ahead,
//                       receive y from the one `offset` behind (point to
//                       point, no deadlock); backward: the same with -offset.
//                       With a 16-bit `wire` the sender keeps what rounding
//                       took off x, so the members' sum stays exact.
//
// The last two are Megatron-LM's f and g: exact when every member computes
// the same downstream values and the loss is counted once (replicated
// downstream). GroupIdentity moves nothing forward, so it is not a collective.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

const std::vector<std::string> kGroupAttrs = {"group", "group_size"};

OpDefBuilder GroupOp(const char* name, const char* summary) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", {DT_FLOAT})
      .Output("y")
      .RequiredAttr("group", AttrType::kString, "the process group (the plan's groups)")
      .RequiredAttr("group_size", AttrType::kInt, "how many ranks the group has")
      .SetCostFn(cost_fns::NoFlops);
}

OpDefBuilder GroupCollectiveOp(const char* name, const char* summary) {
  return GroupOp(name, summary)
      .Collective()
      .Attr("bucket", AttrType::kInt, IntAttr(-1),
            "position in the group's per-step issue order (assigned when the plan is finished)")
      .Attr("eval_bucket", AttrType::kInt, IntAttr(-1),
            "position in the group's order during evaluation (-1: not run in evaluation)");
}

absl::Status CheckGroupSize(const InferenceContext& c) {
  if (c.GetString("group").empty()) return absl::InvalidArgumentError("attribute 'group' must name a group");
  if (c.GetInt("group_size") < 1) return absl::InvalidArgumentError("group_size must be >= 1");
  if (c.input_shape(0).rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0), " must have a dimension 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ShapeAndType>> GatheredShape(const InferenceContext& c) {
  RETURN_IF_ERROR(CheckGroupSize(c));
  std::vector<int64_t> dims = c.input_shape(0).dims();
  if (dims[0] != kUnknownDim) dims[0] *= c.GetInt("group_size");
  return shape_fns::Single(TensorShape(dims), c.input_dtype(0));
}

absl::StatusOr<std::vector<ShapeAndType>> ScatteredShape(const InferenceContext& c) {
  RETURN_IF_ERROR(CheckGroupSize(c));
  std::vector<int64_t> dims = c.input_shape(0).dims();
  const int64_t g = c.GetInt("group_size");
  if (dims[0] != kUnknownDim) {
    if (dims[0] % g != 0) {
      return absl::InvalidArgumentError(absl::StrCat("dimension 0 of ", shape_fns::DescribeInput(c, 0), " (",
                                                     dims[0], ") does not divide into ", g, " group members"));
    }
    dims[0] /= g;
  }
  return shape_fns::Single(TensorShape(dims), c.input_dtype(0));
}

absl::StatusOr<std::vector<ShapeAndType>> SameShape(const InferenceContext& c) {
  RETURN_IF_ERROR(CheckGroupSize(c));
  return shape_fns::UnchangedShape(c);
}

// The gradient of a group op: its conjugate on the incoming gradient.
GradFn Conjugate(const char* op) {
  return [op](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", op, {dy}, kGroupAttrs));
    return GradResult{dx};
  };
}

NEREID_REGISTER_OP(GroupCollectiveOp("GroupAllGather",
                                     "The group members' x concatenated along dimension 0, member 0's first "
                                     "(every member gets all). Gradient: GroupReduceScatter.")
                       .SetShapeFn(GatheredShape)
                       .SetGradient(Conjugate("GroupReduceScatter")));

// reduce=avg (colocated parameter servers averaging gradients, after
// autodiff) has no gradient written: its conjugate would need a 1/size.
GradFn ReduceScatterGradient() {
  GradFn conjugate = Conjugate("GroupAllGather");
  return [conjugate](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    if (g.attr("reduce").s() != "sum") {
      return absl::UnimplementedError("GroupReduceScatter with reduce=avg has no gradient; use reduce=sum");
    }
    return conjugate(g);
  };
}

NEREID_REGISTER_OP(GroupCollectiveOp("GroupReduceScatter",
                                     "The sum (or mean) of the group members' x, of which member i keeps block i "
                                     "of dimension 0 (cut into group_size blocks). Gradient: GroupAllGather.")
                       .EnumAttr("reduce", {"sum", "avg"}, "sum", "sum, or avg: the sum over the group's size")
                       .SetShapeFn(ScatteredShape)
                       .SetGradient(ReduceScatterGradient()));

NEREID_REGISTER_OP(GroupCollectiveOp("GroupAllReduce",
                                     "The sum of the group members' x on every member. Gradient: identity "
                                     "(the downstream is replicated on every member).")
                       .EnumAttr("wire", {"float32", "float16", "bfloat16"}, "float32",
                                 "number format on the wire (compress(fp16|bf16) sets it); sums are taken "
                                 "in float32")
                       .SetShapeFn(SameShape)
                       .SetGradient(PassThroughGradient));

absl::StatusOr<std::vector<ShapeAndType>> ShiftedShape(const InferenceContext& c) {
  RETURN_IF_ERROR(CheckGroupSize(c));
  if (c.GetIntList("offsets").empty()) return absl::InvalidArgumentError("offsets must not be empty");
  return shape_fns::UnchangedShape(c);
}

// The shift back: every offset negated.
absl::StatusOr<GradResult> SendRecvGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  std::vector<int64_t> back;
  for (const int64_t o : g.attr("offsets").list().i()) back.push_back(-o);
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "GroupSendRecv", {dy},
                                     {{"group", g.attr("group")},
                                      {"group_size", g.attr("group_size")},
                                      {"offsets", IntListAttr(back)}}));
  return GradResult{dx};
}

NEREID_REGISTER_OP(GroupCollectiveOp("GroupSendRecv",
                                     "Point to point around the group: member r sends x to member (r + offset) "
                                     "mod group_size and receives y from (r - offset), all at once, so it cannot "
                                     "deadlock; the offset of step s is offsets[s mod len] (a time-varying "
                                     "topology). Gradient: the same with the offsets negated.")
                       .RequiredAttr("offsets", AttrType::kIntList, "the offset of each step, cycled")
                       .EnumAttr("wire", {"float32", "float16", "bfloat16"}, "float32",
                                 "number format on the wire (compress(fp16|bf16) sets it): x travels "
                                 "rounded, and y = what arrived + (x - x rounded), so the sum over the "
                                 "members is what float32 would give (push-sum keeps its mass)")
                       .SetShapeFn(ShiftedShape)
                       .SetGradient(SendRecvGradient));

NEREID_REGISTER_OP(GroupOp("GroupIdentity",
                           "y = x, no communication. Gradient: GroupAllReduce (the sum of the members' "
                           "gradients), for a value every member uses with its own shard.")
                       .SetShapeFn(SameShape)
                       .SetGradient(Conjugate("GroupAllReduce")));

}  // namespace
}  // namespace nereid
