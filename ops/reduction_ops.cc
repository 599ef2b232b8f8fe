// Sum, mean and max over any set of axes (ONNX's ReduceSum, ReduceMean,
// ReduceMax), keeping the reduced dimensions as 1s or dropping them.

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> ReduceShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  std::vector<int64_t> axes = c.GetIntList("axes");
  std::set<int64_t> reduced;
  for (int64_t a : axes) {
    int64_t axis = a < 0 ? a + x.rank() : a;
    if (axis < 0 || axis >= x.rank() || !reduced.insert(axis).second) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'axes' [", absl::StrJoin(axes, ","),
                                                     "] is out of range or repeats an axis for ",
                                                     shape_fns::DescribeInput(c, 0)));
    }
  }
  const bool keep = c.GetBool("keepdims");
  std::vector<int64_t> out;
  for (int i = 0; i < x.rank(); ++i) {
    const bool is_reduced = axes.empty() || reduced.count(i) > 0;
    if (!is_reduced) {
      out.push_back(x.dim(i));
    } else if (keep) {
      out.push_back(1);
    }
  }
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

// dy spread back over x's shape: each reduced element gets its output's
// gradient (divided by the count for a mean).
GradFn ExpandGradient(bool mean) {
  return [mean](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "ExpandReduced", {dy, g.input(0)},
                                       {{"axes", g.attr("axes")}, {"keepdims", g.attr("keepdims")},
                                        {"mean", BoolAttr(mean)}}));
    return GradResult{dx};
  };
}

absl::StatusOr<GradResult> ReduceMaxGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "ReduceMaxGrad", {dy, g.input(0), g.output(0)},
                                                {"axes", "keepdims"}));
  return GradResult{dx};
}

OpDefBuilder Reduce(const char* name, const char* summary, GradFn grad) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Output("y")
      .Attr("axes", AttrType::kIntList, IntListAttr({}), "the reduced axes (negative: from the end); none: all")
      .Attr("keepdims", AttrType::kBool, BoolAttr(true))
      .SetShapeFn(ReduceShape)
      .SetCostFn([](const InferenceContext& c, const std::vector<ShapeAndType>&) {
        return c.input_shape(0).KnownElements();
      })
      .SetGradient(std::move(grad));
}

NEREID_REGISTER_OP(Reduce("ReduceSum", "The sum over `axes`.", ExpandGradient(false)));
NEREID_REGISTER_OP(Reduce("ReduceMean", "The mean over `axes`.", ExpandGradient(true)));
NEREID_REGISTER_OP(Reduce("ReduceMax", "The largest value over `axes`.", ReduceMaxGradient));

NEREID_REGISTER_OP(GradientOp("ExpandReduced", "dy repeated along the reduced axes to x's shape (/ count if `mean`).",
                              {"dy", "x"}, 1)
                       .Attr("axes", AttrType::kIntList, IntListAttr({}))
                       .Attr("keepdims", AttrType::kBool, BoolAttr(true))
                       .Attr("mean", AttrType::kBool, BoolAttr(false)));
NEREID_REGISTER_OP(GradientOp("ReduceMaxGrad", "dy where x equals its maximum y (every tie gets it), else 0.",
                              {"dy", "x", "y"}, 1)
                       .Attr("axes", AttrType::kIntList, IntListAttr({}))
                       .Attr("keepdims", AttrType::kBool, BoolAttr(true)));

}  // namespace
}  // namespace nereid
