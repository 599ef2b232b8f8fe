// Dense layers: matrix multiply and bias add.

#include "absl/strings/str_cat.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> MatMulShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 2, "a matrix"));
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 1, 2, "a matrix"));
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, 1));
  const TensorShape& a = c.input_shape(0);
  const TensorShape& b = c.input_shape(1);
  bool ta = c.GetBool("transpose_a"), tb = c.GetBool("transpose_b");
  int64_t m = ta ? a.dim(1) : a.dim(0), ka = ta ? a.dim(0) : a.dim(1);
  int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (!shape_fns::DimsAgree(ka, kb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inner dimensions disagree: ", shape_fns::DescribeInput(c, 0), ta ? " (transposed)" : "",
        " times ", shape_fns::DescribeInput(c, 1), tb ? " (transposed)" : "", " (", ka, " vs ", kb, ")"));
  }
  return shape_fns::Single(TensorShape({m, n}), c.input_dtype(0));
}

int64_t MatMulCost(const InferenceContext& c, const std::vector<ShapeAndType>& out) {
  const TensorShape& a = c.input_shape(0);
  int64_t k = c.GetBool("transpose_a") ? a.dim(0) : a.dim(1);
  return cost_fns::SaturatingMul(2 * out[0].shape.KnownElements(), k == kUnknownDim ? 1 : k);
}

absl::StatusOr<std::vector<ShapeAndType>> BiasAddShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape_fns::DescribeInput(c, 0), " must have rank >= 2 (batch, channels, ...)"));
  }
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 1, 1, "one value per channel"));
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, 1));
  if (!shape_fns::DimsAgree(x.dim(1), c.input_shape(1).dim(0))) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 1), " does not match dimension 1 of ",
                                                   shape_fns::DescribeInput(c, 0)));
  }
  return shape_fns::UnchangedShape(c);
}

NEREID_REGISTER_OP(OpDefBuilder("MatMul")
                       .Summary("y = a @ b for matrices (optionally transposed).")
                       .Input("a", kFloatTypes)
                       .Input("b", kFloatTypes)
                       .Output("y")
                       .Attr("transpose_a", AttrType::kBool, BoolAttr(false))
                       .Attr("transpose_b", AttrType::kBool, BoolAttr(false))
                       .SetShapeFn(MatMulShape)
                       .SetCostFn(MatMulCost));

NEREID_REGISTER_OP(OpDefBuilder("BiasAdd")
                       .Summary("y = x + bias along dimension 1 (features, or NCHW channels).")
                       .Input("x", kFloatTypes)
                       .Input("bias", kFloatTypes)
                       .Output("y")
                       .SetShapeFn(BiasAddShape)
                       .SetCostFn(cost_fns::OneFlopPerOutput));

}  // namespace
}  // namespace nereid
