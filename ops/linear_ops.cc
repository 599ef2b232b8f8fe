// Dense layers: matrix multiply (of matrices, and batched with broadcasting)
// and bias add.

#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
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

// [..., M, K] @ [..., K, N] -> [broadcast(...), M, N]; transposes apply to the
// last two dimensions.
absl::StatusOr<std::vector<ShapeAndType>> BatchMatMulShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, 1));
  const TensorShape& a = c.input_shape(0);
  const TensorShape& b = c.input_shape(1);
  for (int i = 0; i < 2; ++i) {
    if (c.input_shape(i).rank() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(shape_fns::DescribeInput(c, i), " must have rank >= 2 (a batch of matrices)"));
    }
  }
  bool ta = c.GetBool("transpose_a"), tb = c.GetBool("transpose_b");
  const int ra = a.rank(), rb = b.rank();
  int64_t m = a.dim(ra - (ta ? 1 : 2)), ka = a.dim(ra - (ta ? 2 : 1));
  int64_t kb = b.dim(rb - (tb ? 1 : 2)), n = b.dim(rb - (tb ? 2 : 1));
  if (!shape_fns::DimsAgree(ka, kb)) {
    return absl::InvalidArgumentError(absl::StrCat("inner dimensions disagree: ", shape_fns::DescribeInput(c, 0),
                                                   ta ? " (transposed)" : "", " times ", shape_fns::DescribeInput(c, 1),
                                                   tb ? " (transposed)" : "", " (", ka, " vs ", kb, ")"));
  }
  std::vector<int64_t> batch_a(a.dims().begin(), a.dims().end() - 2), batch_b(b.dims().begin(), b.dims().end() - 2);
  absl::StatusOr<TensorShape> batch = shape_fns::Broadcast(TensorShape(batch_a), TensorShape(batch_b));
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the batch dimensions of ", shape_fns::DescribeInput(c, 0), " and ",
                                                   shape_fns::DescribeInput(c, 1), " do not broadcast"));
  }
  std::vector<int64_t> out = batch->dims();
  out.push_back(m);
  out.push_back(n);
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

int64_t BatchMatMulCost(const InferenceContext& c, const std::vector<ShapeAndType>& out) {
  const TensorShape& a = c.input_shape(0);
  int64_t k = a.dim(a.rank() - (c.GetBool("transpose_a") ? 2 : 1));
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

// y = op(a) op(b); each gradient is again a product with transposes chosen
// so that no explicit transpose is materialised. A batched product's
// gradients are then summed over the batch dimensions their input was
// broadcast along.
GradFn MatMulGradient(const char* op, bool batched) {
  return [op, batched](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    bool ta = g.attr("transpose_a").b(), tb = g.attr("transpose_b").b();
    NodeOut a = g.input(0), b = g.input(1);
    auto mm = [&](const char* suffix, NodeOut x, NodeOut y, bool tx, bool ty) {
      return g.Add(batched ? absl::StrCat(suffix, "_full") : suffix, op, {x, y},
                   {{"transpose_a", BoolAttr(tx)}, {"transpose_b", BoolAttr(ty)}});
    };
    const TensorShape& a_shape = a.node->outputs()[a.port].shape;
    const TensorShape& b_shape = b.node->outputs()[b.port].shape;
    const TensorShape& y_shape = g.node().outputs()[0].shape;
    if (batched && !ta && b_shape.rank() == 2 && a_shape.rank() > 2 && a_shape.dim(a_shape.rank() - 1) > 0 &&
        y_shape.dim(y_shape.rank() - 1) > 0) {
      // One matrix b shared by every batch (a linear layer on [B, T, D]):
      // its gradient is one product over all the rows, not a product per
      // batch summed afterwards.
      const int64_t k = a_shape.dim(a_shape.rank() - 1), n = y_shape.dim(y_shape.rank() - 1);
      ASSIGN_OR_RETURN(NodeOut da, mm("a", dy, b, false, !tb));
      ASSIGN_OR_RETURN(NodeOut a_rows, g.Add("a_rows", "Reshape", {a}, {{"shape", IntListAttr({-1, k})}}));
      ASSIGN_OR_RETURN(NodeOut dy_rows, g.Add("dy_rows", "Reshape", {dy}, {{"shape", IntListAttr({-1, n})}}));
      ASSIGN_OR_RETURN(NodeOut db, tb ? g.Add("b", "MatMul", {dy_rows, a_rows}, {{"transpose_a", BoolAttr(true)}})
                                      : g.Add("b", "MatMul", {a_rows, dy_rows}, {{"transpose_a", BoolAttr(true)}}));
      ASSIGN_OR_RETURN(NodeOut da_sum, g.Add("a", "ReduceToShapeOf", {da, a}));
      return GradResult{da_sum, db};
    }
    absl::StatusOr<NodeOut> da, db;
    if (!ta && !tb) {
      da = mm("a", dy, b, false, true);
      db = mm("b", a, dy, true, false);
    } else if (ta && !tb) {
      da = mm("a", b, dy, false, true);
      db = mm("b", a, dy, false, false);
    } else if (!ta && tb) {
      da = mm("a", dy, b, false, false);
      db = mm("b", dy, a, true, false);
    } else {
      da = mm("a", b, dy, true, true);
      db = mm("b", dy, a, true, true);
    }
    RETURN_IF_ERROR(da.status());
    RETURN_IF_ERROR(db.status());
    if (!batched) return GradResult{*da, *db};
    ASSIGN_OR_RETURN(NodeOut da_sum, g.Add("a", "ReduceToShapeOf", {*da, a}));
    ASSIGN_OR_RETURN(NodeOut db_sum, g.Add("b", "ReduceToShapeOf", {*db, b}));
    return GradResult{da_sum, db_sum};
  };
}

absl::StatusOr<GradResult> BiasAddGradFn(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dbias, g.Add("bias", "BiasAddGrad", {dy}));
  return GradResult{dy, dbias};
}

absl::StatusOr<std::vector<ShapeAndType>> BiasAddGradShape(const InferenceContext& c) {
  const TensorShape& dy = c.input_shape(0);
  if (dy.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0), " must have rank >= 2"));
  }
  return shape_fns::Single(TensorShape({dy.dim(1)}), c.input_dtype(0));
}

NEREID_REGISTER_OP(OpDefBuilder("MatMul")
                       .Summary("y = a @ b for matrices (optionally transposed).")
                       .Input("a", kFloatTypes)
                       .Input("b", kFloatTypes)
                       .Output("y")
                       .Attr("transpose_a", AttrType::kBool, BoolAttr(false))
                       .Attr("transpose_b", AttrType::kBool, BoolAttr(false))
                       .SetShapeFn(MatMulShape)
                       .SetCostFn(MatMulCost)
                       .SetGradient(MatMulGradient("MatMul", /*batched=*/false)));

NEREID_REGISTER_OP(OpDefBuilder("BatchMatMul")
                       .Summary("y[...] = a[...] @ b[...] over the last two dimensions (optionally transposed), "
                                "the leading ones broadcast as in NumPy's matmul.")
                       .Input("a", kFloatTypes)
                       .Input("b", kFloatTypes)
                       .Output("y")
                       .Attr("transpose_a", AttrType::kBool, BoolAttr(false))
                       .Attr("transpose_b", AttrType::kBool, BoolAttr(false))
                       .SetShapeFn(BatchMatMulShape)
                       .SetCostFn(BatchMatMulCost)
                       .SetGradient(MatMulGradient("BatchMatMul", /*batched=*/true)));

NEREID_REGISTER_OP(OpDefBuilder("BiasAdd")
                       .Summary("y = x + bias along dimension 1 (features, or NCHW channels).")
                       .Input("x", kFloatTypes)
                       .Input("bias", kFloatTypes)
                       .Output("y")
                       .SetShapeFn(BiasAddShape)
                       .SetCostFn(cost_fns::OneFlopPerOutput)
                       .SetGradient(BiasAddGradFn));

NEREID_REGISTER_OP(OpDefBuilder("BiasAddGrad")
                       .Summary("The bias gradient of BiasAdd: dy summed over every dimension but 1.")
                       .Input("dy", kFloatTypes)
                       .Output("dbias")
                       .NoGradient("a gradient op (no second derivatives)")
                       .SetShapeFn(BiasAddGradShape)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
