// Communication ops the distribution passes insert. They run through the
// worker's collective engine (schedulers/collective_engine.h), which issues them
// in one fixed order on every rank.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> SameAsInputs(const InferenceContext& c) {
  std::vector<ShapeAndType> out;
  for (int i = 0; i < c.num_inputs(); ++i) {
    RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, i));
    if (!c.input_shape(i).IsFullyDefined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(shape_fns::DescribeInput(c, i), " must have a fully known shape to be communicated"));
    }
    out.push_back({c.input_shape(i), c.input_dtype(i)});
  }
  if (c.GetInt("bucket") < 0) return absl::InvalidArgumentError("bucket must be >= 0");
  return out;
}

NEREID_REGISTER_OP(OpDefBuilder("AllReduce")
                       .Summary("A gradient bucket: its tensors are fused into one buffer, reduced across "
                                "every data-parallel rank (ring allreduce), and split again; output i is the "
                                "reduction of input i. Buckets run in `bucket` order on every rank.")
                       .InputList("values", 1, {DT_FLOAT})
                       .OutputList("reduced")
                       .RequiredAttr("bucket", AttrType::kInt, "position in the fixed per-step issue order")
                       .EnumAttr("reduce", {"avg", "sum"}, "avg")
                       .Attr("group", AttrType::kString, StringAttr(""),
                             "the process group it reduces over (the plan's groups); empty: every rank")
                       .EnumAttr("wire", {"float32", "float16", "bfloat16"}, "float32",
                                 "number format on the wire (the compress pass sets 16-bit ones); sums "
                                 "are taken in float32")
                       .Collective()
                       .NoGradient("communication is inserted after autodiff")
                       .SetShapeFn(SameAsInputs)
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("CompressedAllReduce")
                       .Summary("Gradients averaged across the data-parallel ranks in compressed form by a "
                                "gradient codec each (compress/), one collective per round for all: "
                                "inputs are the `gradients` gradients, then each one's codec state "
                                "(error-feedback residuals, momentum, bases); outputs the averages, then the "
                                "next state. Runs in `bucket` order with the AllReduce buckets.")
                       .InputList("values", 1, {DT_FLOAT})
                       .OutputList("reduced")
                       .RequiredAttr("bucket", AttrType::kInt, "position in the fixed per-step issue order")
                       .RequiredAttr("method", AttrType::kString, "codec name (`nereid passes` lists them)")
                       .Attr("options", AttrType::kString, StringAttr(""), "codec options, key=value;...")
                       .Attr("gradients", AttrType::kInt, IntAttr(1), "how many inputs are gradients")
                       .Attr("names", AttrType::kString, StringAttr(""), "the gradients' names, comma-separated")
                       .Attr("layer", AttrType::kInt, IntAttr(0), "the first gradient's index among compressed ones")
                       .Attr("seed", AttrType::kInt, IntAttr(0), "seed of stochastic rounding")
                       .Collective()
                       .NoGradient("communication is inserted after autodiff")
                       .SetShapeFn(SameAsInputs)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
