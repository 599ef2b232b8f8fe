// Shape-changing ops that move no arithmetic: Flatten, Reshape, Slice, Concat,
// Transpose, Pad.

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> FlattenShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  int64_t axis = c.GetInt("axis");
  if (axis < 0 || axis > x.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'axis' ", axis, " is out of range for ", shape_fns::DescribeInput(c, 0)));
  }
  std::vector<int64_t> out(x.dims().begin(), x.dims().begin() + axis);
  int64_t inner = 1;
  for (int i = axis; i < x.rank(); ++i) {
    ASSIGN_OR_RETURN(inner, shape_fns::MultiplyDims(inner, x.dim(i)));
  }
  out.push_back(inner);
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

absl::StatusOr<std::vector<ShapeAndType>> ReshapeShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  std::vector<int64_t> target = c.GetIntList("shape");
  int inferred = -1;
  int64_t known_target = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (inferred >= 0) return absl::InvalidArgumentError("attribute 'shape' has more than one -1");
      inferred = static_cast<int>(i);
    } else if (target[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'shape' has a negative dimension ", target[i]));
    } else {
      ASSIGN_OR_RETURN(known_target, shape_fns::MultiplyDims(known_target, target[i]));
    }
  }
  std::string target_str = absl::StrCat("[", absl::StrJoin(target, ","), "]");
  int64_t known_in = x.KnownElements();
  if (x.HasUnknownDim()) {
    // The -1 absorbs the unknown dimension, possibly with known ones beside it
    // ([T*B, D] -> [T, -1, D]): the sizes are checked when the batch is known.
    if (inferred < 0 || known_target == 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_fns::DescribeInput(c, 0), " to ",
                                                     target_str, ": with an unknown input dimension the "
                                                     "target needs one -1 that absorbs it"));
    }
    target[inferred] = kUnknownDim;
  } else if (inferred >= 0) {
    if (known_target == 0 || known_in % known_target != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_fns::DescribeInput(c, 0), " (",
                                                     known_in, " elements) to ", target_str));
    }
    target[inferred] = known_in / known_target;
  } else if (known_in != known_target) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_fns::DescribeInput(c, 0), " (",
                                                   known_in, " elements) to ", target_str, " (",
                                                   known_target, " elements)"));
  }
  return shape_fns::Single(TensorShape(std::move(target)), c.input_dtype(0));
}

// [.., n, ..] -> [.., size, ..]: elements begin, begin + stride, .. along
// `axis` (ONNX Slice and Split, the parameter server's chunks).
absl::StatusOr<std::vector<ShapeAndType>> SliceShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  ASSIGN_OR_RETURN(const int axis, shape_fns::AxisAttr(c, "axis"));
  const int64_t begin = c.GetInt("begin"), size = c.GetInt("size"), stride = c.GetInt("stride");
  const int64_t n = x.dim(static_cast<int>(axis));
  if (stride < 1 || stride > shape_fns::kMaxWindowValue) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'stride' must be in [1, 2^31], got ", stride));
  }
  if (begin < 0 || size < 1 || size > n || (n != kUnknownDim && begin + (size - 1) * stride >= n)) {
    return absl::InvalidArgumentError(absl::StrCat("slice of ", size, " elements from ", begin, " in steps of ", stride,
                                                   " is not inside dimension ", axis, " of ",
                                                   shape_fns::DescribeInput(c, 0)));
  }
  std::vector<int64_t> out = x.dims();
  out[axis] = size;
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

// The slice's gradient: dy put back where its elements came from, zeros
// elsewhere.
absl::StatusOr<GradResult> SliceGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "SliceGrad", {dy, g.input(0)}, {"axis", "begin", "stride"}));
  return GradResult{dx};
}

absl::StatusOr<std::vector<ShapeAndType>> ConcatShape(const InferenceContext& c) {
  const TensorShape& first = c.input_shape(0);
  int rank = first.rank();
  ASSIGN_OR_RETURN(const int axis, shape_fns::AxisAttr(c, "axis"));
  std::vector<int64_t> out = first.dims();
  for (int i = 1; i < c.num_inputs(); ++i) {
    RETURN_IF_ERROR(shape_fns::RequireSameDtype(c, 0, i));
    const TensorShape& s = c.input_shape(i);
    bool agree = s.rank() == rank;
    for (int d = 0; agree && d < rank; ++d) {
      if (d != axis && !shape_fns::DimsAgree(s.dim(d), out[d])) agree = false;
    }
    if (!agree) {
      return absl::InvalidArgumentError(absl::StrCat("cannot concatenate along axis ", axis, ": ",
                                                     shape_fns::DescribeInput(c, 0), " and ",
                                                     shape_fns::DescribeInput(c, i), " differ elsewhere"));
    }
    if (out[axis] == kUnknownDim || s.dim(axis) == kUnknownDim) {
      out[axis] = kUnknownDim;
    } else {
      out[axis] += s.dim(axis);
    }
  }
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

// `perm` as given, or reversed dims when empty (ONNX's default); an error
// unless it is a permutation of 0..rank-1.
absl::StatusOr<std::vector<int64_t>> Permutation(std::vector<int64_t> perm, int rank) {
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'perm' [", absl::StrJoin(perm, ","), "] is not a permutation of 0..", rank - 1));
  }
  return perm;
}

absl::StatusOr<std::vector<ShapeAndType>> TransposeShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  absl::StatusOr<std::vector<int64_t>> perm = Permutation(c.GetIntList("perm"), x.rank());
  if (!perm.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(perm.status().message(), " for ", shape_fns::DescribeInput(c, 0)));
  }
  std::vector<int64_t> out;
  for (int64_t p : *perm) out.push_back(x.dim(static_cast<int>(p)));
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

// The gradient of a transpose is the transpose by the inverse permutation.
absl::StatusOr<GradResult> TransposeGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  const int rank = g.node().outputs()[0].shape.rank();
  std::vector<int64_t> given(g.attr("perm").list().i().begin(), g.attr("perm").list().i().end());
  ASSIGN_OR_RETURN(std::vector<int64_t> perm, Permutation(given, rank));
  std::vector<int64_t> inverse(rank);
  for (int i = 0; i < rank; ++i) inverse[perm[i]] = i;
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "Transpose", {dy}, {{"perm", IntListAttr(inverse)}}));
  return GradResult{dx};
}

// pads: begins for every axis, then ends (ONNX's order); the output grows by
// both.
// ONNX's Expand: x broadcast with `shape`; a 1 (or -1) there keeps x's
// dimension, so a target holding the varying batch is written with -1.
absl::StatusOr<std::vector<ShapeAndType>> ExpandShape(const InferenceContext& c) {
  std::vector<int64_t> target = c.GetIntList("shape");
  for (int64_t& d : target) {
    if (d == -1) {
      d = 1;
    } else if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'shape' holds ", d, "; dimensions are >= 0 or -1"));
    }
  }
  ASSIGN_OR_RETURN(TensorShape out, shape_fns::Broadcast(c.input_shape(0), TensorShape(target)));
  return shape_fns::Single(std::move(out), c.input_dtype(0));
}

absl::StatusOr<GradResult> ExpandGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "ReduceToShapeOf", {dy, g.input(0)}));
  return GradResult{dx};
}

absl::StatusOr<std::vector<ShapeAndType>> PadShape(const InferenceContext& c) {
  const TensorShape& x = c.input_shape(0);
  std::vector<int64_t> pads = c.GetIntList("pads");
  if (static_cast<int>(pads.size()) != 2 * x.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'pads' has ", pads.size(), " entries; ",
                                                   shape_fns::DescribeInput(c, 0), " needs ", 2 * x.rank(),
                                                   " (every axis's begin, then every end)"));
  }
  std::vector<int64_t> out = x.dims();
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t begin = pads[i], end = pads[i + x.rank()];
    if (begin < 0 || end < 0 || begin > shape_fns::kMaxWindowValue || end > shape_fns::kMaxWindowValue) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'pads' [", absl::StrJoin(pads, ","),
                                                     "] must hold values in [0, 2^31]"));
    }
    if (out[i] != kUnknownDim) {
      ASSIGN_OR_RETURN(out[i], shape_fns::MultiplyDims(1, out[i] + begin + end));
    }
  }
  return shape_fns::Single(TensorShape(std::move(out)), c.input_dtype(0));
}

absl::StatusOr<GradResult> PadGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", "PadGrad", {dy, g.input(0)}, {"pads"}));
  return GradResult{dx};
}

// Reshapes move no data, so their gradient is dy given x's shape back.
absl::StatusOr<GradResult> ReshapeGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "ReshapeLike", {dy, g.input(0)}));
  return GradResult{dx};
}

// Each input's gradient is its slice of dy; offsets along the axis come from
// the inputs' inferred shapes, so they must be known there.
absl::StatusOr<GradResult> ConcatGradient(GradientBuilder& g) {
  ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
  int rank = g.node().outputs()[0].shape.rank();
  int64_t axis = g.attr("axis").i();
  if (axis < 0) axis += rank;
  GradResult result;
  int64_t begin = 0;
  for (int i = 0; i < g.node().num_inputs(); ++i) {
    NodeOut x = g.input(i);
    int64_t size = x.node->outputs()[x.port].shape.dim(static_cast<int>(axis));
    if (size == kUnknownDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot differentiate Concat along axis ", axis, ": input ", i, "'s size there is unknown"));
    }
    ASSIGN_OR_RETURN(NodeOut dx, g.Add(absl::StrCat("values_", i), "SliceLike", {dy, x},
                                       {{"axis", IntAttr(axis)}, {"begin", IntAttr(begin)}}));
    result.push_back(dx);
    begin += size;
  }
  return result;
}

NEREID_REGISTER_OP(GradientOp("ReshapeLike", "dy reshaped to x's shape.", {"dy", "x"}, 1));
NEREID_REGISTER_OP(GradientOp("SliceLike", "The slice of dy along `axis` starting at `begin`, as long as x is there.",
                              {"dy", "x"}, 1)
                       .RequiredAttr("axis", AttrType::kInt)
                       .RequiredAttr("begin", AttrType::kInt));

NEREID_REGISTER_OP(OpDefBuilder("Flatten")
                       .Summary("Collapses dimensions axis.. into one: [N,C,H,W] -> [N,C*H*W].")
                       .Input("x")
                       .Output("y")
                       .Attr("axis", AttrType::kInt, IntAttr(1))
                       .SetShapeFn(FlattenShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(ReshapeGradient));

NEREID_REGISTER_OP(OpDefBuilder("Reshape")
                       .Summary("Reinterprets the elements with a new shape; one -1 is inferred.")
                       .Input("x")
                       .Output("y")
                       .RequiredAttr("shape", AttrType::kIntList)
                       .SetShapeFn(ReshapeShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(ReshapeGradient));

NEREID_REGISTER_OP(OpDefBuilder("Slice")
                       .Summary("x[..., begin : begin + size * stride : stride, ...] along `axis`.")
                       .Input("x")
                       .Output("y")
                       .Attr("axis", AttrType::kInt, IntAttr(0))
                       .RequiredAttr("begin", AttrType::kInt)
                       .RequiredAttr("size", AttrType::kInt)
                       .Attr("stride", AttrType::kInt, IntAttr(1))
                       .SetShapeFn(SliceShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(SliceGradient));
NEREID_REGISTER_OP(GradientOp("SliceGrad", "Zeros of x's shape with dy where Slice took its elements.", {"dy", "x"}, 1)
                       .Attr("axis", AttrType::kInt, IntAttr(0))
                       .RequiredAttr("begin", AttrType::kInt)
                       .Attr("stride", AttrType::kInt, IntAttr(1)));

NEREID_REGISTER_OP(OpDefBuilder("Transpose")
                       .Summary("Permutes the dimensions: y.dim(i) = x.dim(perm[i]); no perm reverses them.")
                       .Input("x")
                       .Output("y")
                       .Attr("perm", AttrType::kIntList, IntListAttr({}))
                       .SetShapeFn(TransposeShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(TransposeGradient));

NEREID_REGISTER_OP(OpDefBuilder("Pad")
                       .Summary("x surrounded by `value`: pads[i] before and pads[rank + i] after axis i.")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .RequiredAttr("pads", AttrType::kIntList)
                       .Attr("value", AttrType::kFloat, FloatAttr(0.0f))
                       .SetShapeFn(PadShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(PadGradient));
NEREID_REGISTER_OP(GradientOp("PadGrad", "The part of dy Pad copied x into.", {"dy", "x"}, 1)
                       .RequiredAttr("pads", AttrType::kIntList));

NEREID_REGISTER_OP(OpDefBuilder("Expand")
                       .Summary("x broadcast to `shape` (NumPy rules; -1 or 1 keeps x's dimension).")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .RequiredAttr("shape", AttrType::kIntList)
                       .SetShapeFn(ExpandShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(ExpandGradient));

NEREID_REGISTER_OP(OpDefBuilder("Concat")
                       .Summary("Joins tensors along `axis`.")
                       .InputList("values", 1)
                       .Output("y")
                       .Attr("axis", AttrType::kInt, IntAttr(1))
                       .SetShapeFn(ConcatShape)
                       .SetCostFn(cost_fns::NoFlops)
                       .SetGradient(ConcatGradient));

}  // namespace
}  // namespace nereid
