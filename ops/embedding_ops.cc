// Gather: rows of a table picked by integer ids (an embedding lookup), and
// the gradient that adds each picked row's gradient back into its row.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

// params [d0, .., d(axis), ..] and indices I -> [d0, .., d(axis-1), I..., d(axis+1), ..].
absl::StatusOr<std::vector<ShapeAndType>> GatherShape(const InferenceContext& c) {
  const TensorShape& params = c.input_shape(0);
  const TensorShape& indices = c.input_shape(1);
  ASSIGN_OR_RETURN(const int axis, shape_fns::AxisAttr(c, "axis"));
  std::vector<int64_t> out(params.dims().begin(), params.dims().begin() + axis);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), params.dims().begin() + axis + 1, params.dims().end());
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

absl::StatusOr<GradResult> GatherGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dparams, g.AddWithAttrsOf("params", "GatherGrad", {dy, g.input(1), g.input(0)}, {"axis"}));
  return GradResult{dparams, std::nullopt};
}

NEREID_REGISTER_OP(OpDefBuilder("Gather")
                       .Summary("params[.., indices, ..] along `axis` (ids may be negative: counted from the end); "
                                "an embedding lookup is axis 0.")
                       .Input("params", kFloatTypes)
                       .Input("indices", kIndexTypes)
                       .Output("y")
                       .Attr("axis", AttrType::kInt, IntAttr(0))
                       .SetShapeFn(GatherShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(GatherGradient));

NEREID_REGISTER_OP(OpDefBuilder("GatherGrad")
                       .Summary("A table of params' shape, zero except where Gather read: there the sum of dy's "
                                "rows that read it.")
                       .Input("dy", kFloatTypes)
                       .Input("indices", kIndexTypes)
                       .Input("params", kFloatTypes)
                       .Output("dparams")
                       .Attr("axis", AttrType::kInt, IntAttr(0))
                       .NoGradient("a gradient op (no second derivatives)")
                       .SetShapeFn([](const InferenceContext& c) -> absl::StatusOr<std::vector<ShapeAndType>> {
                         return shape_fns::Single(c.input_shape(2), c.input_dtype(2));
                       })
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
