// Where values enter the graph: data inputs, trainable parameters, constants.

#include "absl/strings/str_cat.h"
#include "core/tensor_proto.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

AttrValue DefaultInitializer() {
  AttrValue a;
  a.mutable_tensor()->set_dtype(DT_FLOAT);
  a.mutable_tensor()->mutable_init()->set_kind("glorot_uniform");
  return a;
}

absl::StatusOr<std::vector<ShapeAndType>> InputShape(const InferenceContext& c) {
  auto shape = TensorShape::FromProto(c.GetShape("shape"));
  if (!shape.ok()) return shape.status();
  return shape_fns::Single(*shape, c.GetType("dtype"));
}

// A shape attribute's default that is set (a rank-0 shape), unlike ShapeAttr({}).
AttrValue NoShape() {
  AttrValue a;
  a.mutable_shape();
  return a;
}

absl::StatusOr<std::vector<ShapeAndType>> ParameterShape(const InferenceContext& c) {
  auto shape = TensorShape::FromProto(c.GetShape("shape"));
  if (!shape.ok()) return shape.status();
  if (!shape->IsFullyDefined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a parameter's shape must be fully known, got ", shape->ToString()));
  }
  // A shard's initial value is its block of the full tensor's.
  const int64_t shards = c.GetInt("shard_count");
  const int64_t axis = c.GetInt("shard_axis");
  if (shards < 1) return absl::InvalidArgumentError("shard_count must be >= 1");
  if (shards > 1 && (axis < 0 || axis >= shape->rank())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_axis ", axis, " is outside the parameter's shape ", shape->ToString()));
  }
  if (shards > 1 && c.GetString("shard_group").empty()) {
    return absl::InvalidArgumentError("a sharded parameter (shard_count > 1) needs its shard_group");
  }
  TensorShape full = *shape;
  if (shards > 1) {
    std::vector<int64_t> dims = shape->dims();
    dims[axis] *= shards;
    full = TensorShape(dims);
  }
  // A piece (a parameter server's chunk): elements [init_offset, + size) of
  // the flattened initial value of a tensor shaped init_of_shape. Sharded
  // too (colocated servers' shards), member i's piece starts i pieces
  // later, and zeros fill what lies past the tensor's end.
  if (const int64_t offset = c.GetInt("init_offset"); offset >= 0) {
    auto of = TensorShape::FromProto(c.GetShape("init_of_shape"));
    if (!of.ok() || !of->IsFullyDefined()) return absl::InvalidArgumentError("init_of_shape must be fully known");
    const bool fits = shards > 1 ? shape->rank() == 1 && offset <= of->KnownElements()
                                 : offset + shape->KnownElements() <= of->KnownElements();
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a piece of ", shape->KnownElements(), " elements at init_offset ", offset, " does not fit in init_of_shape ",
          of->ToString(), shards > 1 ? " (a sharded piece must be 1-D and start inside it)" : ""));
    }
    full = *of;
  }
  auto checked = ValidateTensorProto(c.GetTensor("init"), &full);
  if (!checked.ok()) return absl::InvalidArgumentError(absl::StrCat("attribute 'init': ", checked.status().message()));
  return shape_fns::Single(*shape, c.GetType("dtype"));
}

absl::StatusOr<std::vector<ShapeAndType>> ConstShape(const InferenceContext& c) {
  const TensorProto& value = c.GetTensor("value");
  if (value.has_init()) {
    return absl::InvalidArgumentError("attribute 'value': a Const holds values, not an initialiser");
  }
  auto shape = ValidateTensorProto(value);
  if (!shape.ok()) return absl::InvalidArgumentError(absl::StrCat("attribute 'value': ", shape.status().message()));
  return shape_fns::Single(*shape, value.dtype());
}

NEREID_REGISTER_OP(OpDefBuilder("Input")
                       .Summary("A batch of data fed from outside the graph (images, labels).")
                       .Output("y")
                       .RequiredAttr("shape", AttrType::kShape, "dim 0 is usually -1: the batch")
                       .Attr("dtype", AttrType::kType, TypeAttr(DT_FLOAT))
                       .Attr("feed", AttrType::kString, StringAttr(""),
                             "which field of the dataset feeds it: images, labels")
                       .NoGradient("data from outside the graph")
                       .SetShapeFn(InputShape)
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("Parameter")
                       .Summary("A trainable (or running-statistic) tensor carried across iterations: its "
                                "initial value at step 0, then the value its optional `next` input "
                                "(a Feedback) carried from the previous step.")
                       .Output("y")
                       .RequiredAttr("shape", AttrType::kShape)
                       .Attr("dtype", AttrType::kType, TypeAttr(DT_FLOAT))
                       .Attr("init", AttrType::kTensor, DefaultInitializer(),
                             "initial values, or an initialiser spec with a seed")
                       .Attr("trainable", AttrType::kBool, BoolAttr(true),
                             "false for state such as batch-norm running statistics")
                       .Attr("per_rank", AttrType::kBool, BoolAttr(false),
                             "state each data-parallel rank keeps its own value of (error-feedback "
                             "residuals): checkpointed per rank, not checked equal across ranks")
                       .Attr("shard_group", AttrType::kString, StringAttr(""),
                             "set for a shard of a larger tensor: the group whose members hold the shards; "
                             "member i holds block i of shard_count along shard_axis of the full tensor "
                             "(`shape` is the shard's)")
                       .Attr("shard_axis", AttrType::kInt, IntAttr(0), "the axis the full tensor is cut along")
                       .Attr("shard_count", AttrType::kInt, IntAttr(1), "how many shards the full tensor has")
                       .Attr("init_offset", AttrType::kInt, IntAttr(-1),
                             "set (>= 0) for a piece of a larger tensor (a parameter server's chunk): the "
                             "initial value is that tensor's flattened elements from here on; with "
                             "shard_count, member i's from init_offset + i x size on, zeros past the end")
                       .Attr("init_of_shape", AttrType::kShape, NoShape(),
                             "with init_offset: the larger tensor's shape, which `init` is for")
                       .Attr("replica_group", AttrType::kString, StringAttr(""),
                             "a shard's gradient is averaged over this group (the ranks holding the same "
                             "shard); empty: no rank holds the same shard, nothing is averaged")
                       .Attr("gradient_scale", AttrType::kFloat, FloatAttr(1.0f),
                             "autodiff multiplies the gradient by this (a shard's gradient sums its group's "
                             "examples: 1 / group size)")
                       .InputList("next", 0, kFloatTypes)
                       .NoGradient("a source: autodiff collects the gradient of trainable parameters here")
                       .SetShapeFn(ParameterShape)
                       .SetCostFn(cost_fns::NoFlops));

NEREID_REGISTER_OP(OpDefBuilder("Const")
                       .Summary("A constant tensor.")
                       .Output("y")
                       .RequiredAttr("value", AttrType::kTensor)
                       .NoGradient("a constant")
                       .SetShapeFn(ConstShape)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
