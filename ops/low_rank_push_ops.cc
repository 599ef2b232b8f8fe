// LowRankPush: gossip's push (GroupSendRecv) with the values sent as rank-r
// differences from a per-edge reference (compress/low_rank_push.h), which
// compress(method=powersgd) puts on gossip's pushes. The references, the
// warm-start bases and which edges have started are per-rank state, one slot
// per entry of `offsets` (the edge used at step s is slot s mod len). The
// pass closes their loops itself: they are not running statistics (which
// UpdatesState marks, and which are averaged across the ranks).

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> LowRankPushShapes(const InferenceContext& c) {
  if (c.GetString("group").empty()) return absl::InvalidArgumentError("attribute 'group' must name a group");
  if (c.GetInt("group_size") < 1) return absl::InvalidArgumentError("group_size must be >= 1");
  const int64_t slots = static_cast<int64_t>(c.GetIntList("offsets").size());
  if (slots == 0) return absl::InvalidArgumentError("offsets must not be empty");
  const std::vector<int64_t> segments = c.GetIntList("segments");
  if (segments.empty() || segments.size() % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("segments must be (rows, cols, rank) triples; got ",
                                                   segments.size(), " values"));
  }
  int64_t elements = 0, basis = 0;
  for (size_t s = 0; s < segments.size(); s += 3) {
    elements += segments[s] * segments[s + 1];
    basis += segments[s + 1] * segments[s + 2];
  }
  const TensorShape& x = c.input_shape(0);
  if (x.IsFullyDefined() && x.KnownElements() != elements) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0), " ", x.ToString(), " has ",
                                                   x.KnownElements(), " values; the segments cover ", elements));
  }
  const std::vector<TensorShape> state = {TensorShape({slots, elements}), TensorShape({slots, elements}),
                                          TensorShape({slots, basis}), TensorShape({2, slots})};
  std::vector<ShapeAndType> out = {{x, c.input_dtype(0)}};
  for (size_t i = 0; i < state.size(); ++i) {
    const TensorShape& given = c.input_shape(static_cast<int>(i + 1));
    if (given.IsFullyDefined() && given != state[i]) {
      return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, static_cast<int>(i + 1)), " is ",
                                                     given.ToString(), "; the segments and offsets make it ",
                                                     state[i].ToString()));
    }
    out.push_back({state[i], DT_FLOAT});
  }
  return out;
}

NEREID_REGISTER_OP(OpDefBuilder("LowRankPush")
                       .Summary("Gossip's push with low-rank codes: member r sends x to (r + offset) and receives "
                                "from (r - offset), as GroupSendRecv, each segment of x (rows x cols) as the "
                                "rank-r power-iteration approximation of its difference from the edge's "
                                "reference (an edge's first push exact; rank 0: always exact). y = what arrived "
                                "+ (x - what was decoded of x), so the members' sum is kept (push-sum's mass).")
                       .Input("x", {DT_FLOAT})
                       .Input("sent", {DT_FLOAT})
                       .Input("received", {DT_FLOAT})
                       .Input("bases", {DT_FLOAT})
                       .Input("started", {DT_FLOAT})
                       .Output("y")
                       .Output("next_sent")
                       .Output("next_received")
                       .Output("next_bases")
                       .Output("next_started")
                       .RequiredAttr("group", AttrType::kString, "the process group (the plan's groups)")
                       .RequiredAttr("group_size", AttrType::kInt, "how many ranks the group has")
                       .RequiredAttr("offsets", AttrType::kIntList, "the offset of each step, cycled")
                       .RequiredAttr("segments", AttrType::kIntList,
                                     "(rows, cols, rank) per segment of x in order; rank 0 is sent exactly")
                       .Attr("consensus", AttrType::kFloat, FloatAttr(1.0f),
                             "y = x + consensus * (decoded arrival - decoded x): CHOCO-gossip's step size")
                       .Attr("seed", AttrType::kInt, IntAttr(1), "seed of the warm starts' first columns")
                       .Attr("bucket", AttrType::kInt, IntAttr(-1),
                             "position in the group's per-step issue order (assigned when the plan is finished)")
                       .Attr("eval_bucket", AttrType::kInt, IntAttr(-1), "-1: not run in evaluation")
                       .Collective()
                       .NoGradient("inserted after the optimizer (compress on gossip)")
                       .SetShapeFn(LowRankPushShapes)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
