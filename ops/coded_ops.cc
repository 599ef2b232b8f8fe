// Coded computing's two ends (passes/coded_pass.cc, docs/CODED.md): a coded
// worker's CodedSend of its partial result to the master, and the master's
// CodedGather, which receives the results of whichever workers answer a
// round and decodes the uncoded result from the first set that determines it
// (coded/linear_code.h). Both follow the run's departure plan
// (coded/departure_plan.h): a worker gone in a round stays silent, and the
// master does not wait for it.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

// The code and the departures, on both ends: every rank rebuilds the same
// generator and the same plan from them.
OpDefBuilder& AddCodeAttrs(OpDefBuilder& b) {
  return b.EnumAttr("scheme", {"rlnc", "mds", "replication", "none"}, "rlnc", "the code (coded/linear_code.h)")
      .RequiredAttr("n", AttrType::kInt, "coded partitions: one per worker")
      .RequiredAttr("k", AttrType::kInt, "data partitions")
      .Attr("degree", AttrType::kInt, IntAttr(0), "rlnc: partitions each coded partition mixes")
      .Attr("seed", AttrType::kInt, IntAttr(0), "the generator's and the random departures' seed")
      .Attr("departures", AttrType::kString, StringAttr(""), "who is gone when (coded/departure_plan.h)")
      .Attr("channel", AttrType::kInt, IntAttr(-1), "the transfers' number (their tag)");
}

// [rows of `like`, cols].
absl::StatusOr<std::vector<ShapeAndType>> CodedGatherShape(const InferenceContext& c) {
  const TensorShape& like = c.input_shape(0);
  if (like.rank() < 1) return absl::InvalidArgumentError("like must have a first dimension (its rows are kept)");
  const int64_t cols = c.GetInt("cols");
  if (cols < 1) return absl::InvalidArgumentError(absl::StrCat("cols must be >= 1, got ", cols));
  return shape_fns::Single(TensorShape({like.dim(0), cols}), DT_FLOAT);
}

OpDefBuilder CodedSend() {
  OpDefBuilder b("CodedSend");
  b.Summary("A coded worker's partial result x, sent to the master (peer) unless the worker is gone this round; "
            "y = x.")
      .Input("x", {DT_FLOAT})
      .Output("y")
      .RequiredAttr("peer", AttrType::kInt, "the master's rank")
      .RequiredAttr("worker", AttrType::kInt, "this worker's coded partition (0-based)")
      .SetShapeFn(shape_fns::UnchangedShape)
      .Communicates()
      .SetCostFn(cost_fns::NoFlops)
      .NoGradient("coded plans are made after autodiff");
  return AddCodeAttrs(b);
}

OpDefBuilder CodedGather() {
  OpDefBuilder b("CodedGather");
  b.Summary("The master's end: receives each present worker's coded result ([ceil(rows / k), cols]) and, once the "
            "results in hand determine all k partitions, decodes them into y [rows of like, cols] (partition j's "
            "rows j*ceil(rows/k) on, the padding cut).")
      .Input("like", {})
      .Output("y")
      .RequiredAttr("peers", AttrType::kIntList, "worker i's rank is peers[i]")
      .RequiredAttr("cols", AttrType::kInt, "columns of every result")
      .SetShapeFn(CodedGatherShape)
      .Communicates()
      .SetCostFn(cost_fns::NoFlops)
      .NoGradient("coded plans are made after autodiff");
  return AddCodeAttrs(b);
}

NEREID_REGISTER_OP(CodedSend());
NEREID_REGISTER_OP(CodedGather());

}  // namespace
}  // namespace nereid
