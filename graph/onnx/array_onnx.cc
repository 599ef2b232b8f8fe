// ONNX Flatten, Reshape, Squeeze, Unsqueeze, Concat, Slice, Split, Pad,
// Expand, Transpose, Gather, Constant and Dropout -> Flatten / Reshape,
// Concat, Slice, Pad, Expand, Transpose, Gather, Const, Dropout. Shapes that ONNX passes as tensors must be
// constants here: Nereid's Reshape takes its target as an attribute.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

// Output 0: Nereid's `op` (Reshape, Expand) taking input 0 to `shape`.
absl::Status SetShapedOutput(OnnxNodeContext& c, const char* op, const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["shape"] = IntsAttrValue(shape);
  c.SetOutput(0, c.AddNode(op, {x}, attrs));
  return absl::OkStatus();
}

// ONNX Flatten always yields a matrix [d0*..*d(axis-1), d(axis)*..]; Nereid's
// Flatten keeps the leading dims, so only axis 1 maps to it directly; other
// axes become a Reshape whose leading product is static.
absl::Status ConvertFlatten(OnnxNodeContext& c) {
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  int64_t axis = c.IntAttr("axis", 1);
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  if (axis < 0) {
    if (!dims) return c.Unsupported("a negative axis needs the input's rank, which is unknown");
    axis += static_cast<int64_t>(dims->size());
  }
  if (axis < 0 || (dims && axis > static_cast<int64_t>(dims->size()))) {
    return c.Malformed(absl::StrCat("axis ", c.IntAttr("axis", 1), " is out of range for a rank-",
                                    dims ? static_cast<int64_t>(dims->size()) : -1, " input"));
  }
  if (axis == 1) {
    c.SetOutput(0, c.AddNode("Flatten", {x}));
    return absl::OkStatus();
  }
  if (!dims) return c.Unsupported(absl::StrCat("axis ", axis, " needs the input's shape, which is unknown"));
  // [outer, inner] with whichever side is static; the other is -1.
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(dims->size()); ++i) {
    int64_t& side = i < axis ? outer : inner;
    side = (side < 0 || (*dims)[i] < 0) ? -1 : side * (*dims)[i];
  }
  if (outer < 0 && inner < 0) return c.Unsupported(absl::StrCat("axis ", axis, " with unknown dims on both sides"));
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["shape"] = IntsAttrValue({outer, inner < 0 ? -1 : inner});
  if (outer < 0) attrs["shape"] = IntsAttrValue({-1, inner});
  c.SetOutput(0, c.AddNode("Reshape", {x}, attrs));
  return absl::OkStatus();
}

// Squeeze and Unsqueeze (and a Reshape whose result shape inference found)
// move no data: a Reshape to the output's dims, which shape inference knows
// whenever the input's are (one unknown dimension, the batch, becomes -1).
absl::Status ConvertToReshape(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> out = c.OutputDims(0);
  if (!out) return c.Unsupported("the output's shape is unknown");
  int unknown = 0;
  for (int64_t& d : *out) {
    if (d < 0) {
      d = -1;
      ++unknown;
    }
  }
  if (unknown > 1) return c.Unsupported("more than one output dimension is unknown");
  return SetShapedOutput(c, "Reshape", *out);
}

// ONNX's 0 copies the input's dimension: resolved here from the static
// shape, or to -1 for the batch dimension when nothing else is -1. A target
// folded from the input's own shape may hold one dimension that varies (the
// batch): it becomes the -1.
absl::Status ConvertReshape(OnnxNodeContext& c) {
  // Shape inference (which knows the batch is one symbol) usually has the
  // answer: [0, 0, -1] of [T, B, 2, H] is [T, B, 2H].
  std::optional<std::vector<int64_t>> out = c.OutputDims(0);
  if (out && std::count_if(out->begin(), out->end(), [](int64_t d) { return d < 0; }) == 1) {
    return ConvertToReshape(c);
  }
  std::optional<std::vector<std::optional<int64_t>>> partial = c.PartialInts(1);
  if (!partial) return c.Unsupported("the target shape is computed at run time; Nereid needs it constant");
  std::vector<int64_t> target;
  bool has_minus_one = false;
  int unknown = 0;
  for (const std::optional<int64_t>& d : *partial) {
    target.push_back(d.value_or(-1));
    has_minus_one |= d == -1;
    unknown += d.has_value() ? 0 : 1;
  }
  if (unknown + (has_minus_one ? 1 : 0) > 1) {
    return c.Unsupported("the target shape has more than one dimension that is unknown at import");
  }
  has_minus_one |= unknown > 0;
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  bool input_varies = false;
  for (int64_t d : dims.value_or(std::vector<int64_t>{})) input_varies |= d < 0;
  bool copies = false;
  for (int64_t d : target) copies |= d == 0 && !c.IntAttr("allowzero", 0);
  if (input_varies && !has_minus_one && !copies) {
    return c.Unsupported(absl::StrCat(
        "the target shape [", absl::StrJoin(target, ","), "] is fixed, but the input's batch varies: the model was "
        "exported with a fixed batch size; export it with dynamic_axes={INPUT: {0: 'batch'}} so that its shapes "
        "follow the batch"));
  }
  const bool allow_zero = c.IntAttr("allowzero", 0) != 0;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] != 0 || allow_zero) continue;
    if (!dims || i >= dims->size()) return c.Unsupported(absl::StrCat("dimension ", i, " copies an unknown input dimension"));
    if ((*dims)[i] >= 0) {
      target[i] = (*dims)[i];
    } else if (!has_minus_one) {
      target[i] = -1;
      has_minus_one = true;
    } else {
      return c.Unsupported(absl::StrCat("dimension ", i, " copies an input dimension that is not static"));
    }
  }
  if (allow_zero) {
    for (int64_t d : target) {
      if (d == 0) return c.Unsupported("allowzero with a zero dimension (empty tensors are not supported)");
    }
  }
  return SetShapedOutput(c, "Reshape", target);
}

absl::Status ConvertTranspose(OnnxNodeContext& c) {
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  if (c.HasAttr("perm")) attrs["perm"] = IntsAttrValue(c.IntsAttr("perm"));
  c.SetOutput(0, c.AddNode("Transpose", {x}, attrs));
  return absl::OkStatus();
}

// One Nereid Slice per sliced axis: elements start, start + step, .. before
// `end` (ONNX's clamping), on the dims shape inference found.
absl::StatusOr<std::string> SliceAxes(OnnxNodeContext& c, std::string x, const std::vector<int64_t>& dims,
                                      const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                                      const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (axis < 0 || axis >= rank) return c.Malformed(absl::StrCat("axis ", axes[k], " is out of range"));
    const int64_t dim = dims[axis], step = steps[k];
    if (dim < 0) return c.Unsupported(absl::StrCat("slices dimension ", axis, ", whose size is unknown"));
    if (step <= 0) return c.Unsupported(absl::StrCat("step ", step, " (only positive steps are supported)"));
    auto clamp = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    const int64_t begin = clamp(starts[k]), end = clamp(ends[k]);
    const int64_t size = end > begin ? (end - begin + step - 1) / step : 0;
    if (size == 0) return c.Unsupported("an empty slice (empty tensors are not supported)");
    if (size == dim) continue;  // the whole axis
    google::protobuf::Map<std::string, AttrValue> attrs;
    attrs["axis"] = IntAttrValue(axis);
    attrs["begin"] = IntAttrValue(begin);
    attrs["size"] = IntAttrValue(size);
    if (step != 1) attrs["stride"] = IntAttrValue(step);
    x = c.AddNode("Slice", {x}, attrs, absl::StrCat("axis", axis));
  }
  return x;
}

// Bounds are attributes before opset 10 and constant inputs after.
absl::Status ConvertSlice(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  if (!dims) return c.Unsupported("the input's rank is unknown");
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.IntsAttr("starts");
    ends = c.IntsAttr("ends");
    axes = c.IntsAttr("axes");
  } else {
    std::optional<std::vector<int64_t>> s = c.ConstantInts(1), e = c.ConstantInts(2);
    if (!s || !e) return c.Unsupported("the bounds are computed at run time; Nereid needs them constant");
    starts = *s;
    ends = *e;
    if (c.HasInput(3)) {
      std::optional<std::vector<int64_t>> a = c.ConstantInts(3);
      if (!a) return c.Unsupported("the axes are computed at run time");
      axes = *a;
    }
    if (c.HasInput(4)) {
      std::optional<std::vector<int64_t>> st = c.ConstantInts(4);
      if (!st) return c.Unsupported("the steps are computed at run time");
      steps = *st;
    }
  }
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return c.Malformed("starts, ends, axes and steps differ in length");
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  ASSIGN_OR_RETURN(std::string y, SliceAxes(c, x, *dims, starts, ends, axes, steps));
  c.SetOutput(0, y == x ? c.AddNode("Identity", {x}) : y);
  return absl::OkStatus();
}

// Split: one Slice per output, sizes given (an attribute before opset 13,
// an input after) or equal parts.
absl::Status ConvertSplit(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  if (!dims) return c.Unsupported("the input's rank is unknown");
  const int64_t rank = static_cast<int64_t>(dims->size());
  int64_t axis = c.IntAttr("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return c.Malformed(absl::StrCat("axis ", c.IntAttr("axis", 0), " is out of range"));
  const int64_t dim = (*dims)[axis];
  if (dim < 0) return c.Unsupported(absl::StrCat("splits dimension ", axis, ", whose size is unknown"));
  std::vector<int64_t> sizes = c.IntsAttr("split");
  if (c.HasInput(1)) {
    std::optional<std::vector<int64_t>> given = c.ConstantInts(1);
    if (!given) return c.Unsupported("the split sizes are computed at run time");
    sizes = *given;
  }
  const int64_t parts = c.node().output_size();
  if (sizes.empty()) {
    if (dim % parts != 0) return c.Unsupported(absl::StrCat(dim, " does not split into ", parts, " equal parts"));
    sizes.assign(parts, dim / parts);
  }
  int64_t total = 0;
  for (int64_t size : sizes) total += size;
  if (static_cast<int64_t>(sizes.size()) != parts || total != dim) {
    return c.Malformed(absl::StrCat("split sizes do not add up to dimension ", axis, " (", dim, ") in ", parts, " parts"));
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  int64_t begin = 0;
  for (int64_t i = 0; i < parts; ++i) {
    if (sizes[i] <= 0) return c.Unsupported("an empty part (empty tensors are not supported)");
    google::protobuf::Map<std::string, AttrValue> attrs;
    attrs["axis"] = IntAttrValue(axis);
    attrs["begin"] = IntAttrValue(begin);
    attrs["size"] = IntAttrValue(sizes[i]);
    c.SetOutput(static_cast<int>(i), c.AddNode("Slice", {x}, attrs, absl::StrCat("part", i)));
    begin += sizes[i];
  }
  return absl::OkStatus();
}

// Constant padding (pads an attribute before opset 11, a constant input
// after); no padding at all is the input itself. Reflect and edge modes are
// not supported.
// Expand's target may hold the varying batch (folded from a Shape): it
// becomes -1, which keeps the input's dimension, so the input must have the
// batch there already (expanding a 1 to the batch is refused).
absl::Status ConvertExpand(OnnxNodeContext& c) {
  std::optional<int32_t> type = c.InputElemType(0);
  if (type && *type != onnx::TensorProto::FLOAT) return c.Unsupported("a non-float input (Nereid expands floats)");
  std::optional<std::vector<std::optional<int64_t>>> partial = c.PartialInts(1);
  if (!partial) return c.Unsupported("the target shape is computed at run time; Nereid needs it constant");
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  std::vector<int64_t> target;
  for (size_t i = 0; i < partial->size(); ++i) {
    if ((*partial)[i].has_value()) {
      target.push_back(*(*partial)[i]);
      continue;
    }
    const int64_t offset = static_cast<int64_t>(partial->size()) - static_cast<int64_t>(dims ? dims->size() : 0);
    const int64_t axis = static_cast<int64_t>(i) - offset;
    if (!dims || axis < 0 || (*dims)[axis] == 1) {
      return c.Unsupported(absl::StrCat("dimension ", i, " of the target varies (the batch) where the input has none"));
    }
    target.push_back(-1);
  }
  return SetShapedOutput(c, "Expand", target);
}

absl::Status ConvertPad(OnnxNodeContext& c) {
  const std::string mode = c.StringAttr("mode", "constant");
  if (mode != "constant") return c.Unsupported(absl::StrCat("mode '", mode, "' (only constant padding is supported)"));
  std::vector<int64_t> pads = c.IntsAttr("pads");
  float value = c.FloatAttr("value", 0.0f);
  if (c.opset() >= 11) {
    std::optional<std::vector<int64_t>> given = c.ConstantInts(1);
    if (!given) return c.Unsupported("the pads are computed at run time; Nereid needs them constant");
    pads = *given;
    if (c.HasInput(2)) {
      std::optional<std::vector<float>> v = c.ConstantFloats(2);
      if (!v || v->size() != 1) return c.Unsupported("the padding value must be a constant scalar");
      value = (*v)[0];
    }
  }
  for (int64_t p : pads) {
    if (p < 0) return c.Unsupported("negative pads (cropping)");
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
    c.SetOutput(0, c.AddNode("Identity", {x}));
    return absl::OkStatus();
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["pads"] = IntsAttrValue(pads);
  if (value != 0.0f) attrs["value"] = FloatAttrValue(value);
  c.SetOutput(0, c.AddNode("Pad", {x}, attrs));
  return absl::OkStatus();
}

// Gather picks from float data by integer ids (an embedding lookup).
absl::Status ConvertGather(OnnxNodeContext& c) {
  std::optional<int32_t> data = c.InputElemType(0), ids = c.InputElemType(1);
  if (data && *data != onnx::TensorProto::FLOAT) return c.Unsupported("only float data can be gathered");
  if (ids && *ids != onnx::TensorProto::INT64 && *ids != onnx::TensorProto::INT32) {
    return c.Malformed("the indices must be int32 or int64");
  }
  ASSIGN_OR_RETURN(std::string params, c.Input(0));
  ASSIGN_OR_RETURN(std::string indices, c.Input(1));
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["axis"] = IntAttrValue(c.IntAttr("axis", 0));
  c.SetOutput(0, c.AddNode("Gather", {params, indices}, attrs));
  return absl::OkStatus();
}

absl::Status ConvertConcat(OnnxNodeContext& c) {
  if (!c.HasAttr("axis")) return c.Malformed("attribute 'axis' is required");
  std::vector<std::string> inputs;
  for (int i = 0; i < c.num_inputs(); ++i) {
    ASSIGN_OR_RETURN(std::string in, c.Input(i));
    inputs.push_back(in);
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["axis"] = IntAttrValue(c.IntAttr("axis", 1));
  c.SetOutput(0, c.AddNode("Concat", inputs, attrs));
  return absl::OkStatus();
}

// A Constant given as a tensor becomes a Const node when something uses it
// as data (the importer does that lazily, so shape constants make no
// node); the scalar and list forms become one here.
absl::Status ConvertConstant(OnnxNodeContext& c) {
  if (c.HasAttr("value")) return absl::OkStatus();
  google::protobuf::Map<std::string, AttrValue> attrs;
  TensorProto* t = attrs["value"].mutable_tensor();
  t->mutable_shape();
  if (c.HasAttr("value_float")) {
    t->set_dtype(DT_FLOAT);
    t->add_float_val(c.FloatAttr("value_float", 0));
  } else if (c.HasAttr("value_floats")) {
    t->set_dtype(DT_FLOAT);
    for (float f : c.Attr("value_floats")->floats()) t->add_float_val(f);
    t->mutable_shape()->add_dim(c.Attr("value_floats")->floats_size());
  } else if (c.HasAttr("value_int")) {
    t->set_dtype(DT_INT64);
    t->add_int64_val(c.IntAttr("value_int", 0));
  } else if (c.HasAttr("value_ints")) {
    t->set_dtype(DT_INT64);
    std::vector<int64_t> v = c.IntsAttr("value_ints");
    for (int64_t i : v) t->add_int64_val(i);
    t->mutable_shape()->add_dim(static_cast<int64_t>(v.size()));
  } else {
    return c.Unsupported("only value, value_float(s) and value_int(s) constants are supported");
  }
  c.SetOutput(0, c.AddNode("Const", {}, attrs));
  return absl::OkStatus();
}

// The rate is an attribute before opset 12 and a constant input after;
// training_mode is not taken from the model: Nereid drops out while
// training and not while evaluating.
absl::Status ConvertDropout(OnnxNodeContext& c) {
  float rate = c.FloatAttr("ratio", 0.5f);
  if (c.HasInput(1)) {
    std::optional<std::vector<float>> r = c.ConstantFloats(1);
    if (!r || r->size() != 1) return c.Unsupported("the ratio must be a constant scalar");
    rate = (*r)[0];
  }
  if (c.OutputUsed(1)) return c.Unsupported("the mask output is not supported");
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["rate"] = FloatAttrValue(rate);
  c.SetOutput(0, c.AddNode("Dropout", {x}, attrs));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("Flatten", "axis", ConvertFlatten);
NEREID_REGISTER_ONNX_OP("Reshape", "allowzero", ConvertReshape);
NEREID_REGISTER_ONNX_OP("Squeeze", "axes", ConvertToReshape);
NEREID_REGISTER_ONNX_OP("Unsqueeze", "axes", ConvertToReshape);
NEREID_REGISTER_ONNX_OP("Concat", "axis", ConvertConcat);
NEREID_REGISTER_ONNX_OP("Slice", "starts ends axes", ConvertSlice);
NEREID_REGISTER_ONNX_OP("Split", "axis split", ConvertSplit);
NEREID_REGISTER_ONNX_OP("Pad", "mode pads value", ConvertPad);
NEREID_REGISTER_ONNX_OP("Expand", "", ConvertExpand);
NEREID_REGISTER_ONNX_OP("Transpose", "perm", ConvertTranspose);
NEREID_REGISTER_ONNX_OP("Gather", "axis", ConvertGather);
NEREID_REGISTER_ONNX_OP("Constant", "value value_float value_floats value_int value_ints", ConvertConstant);
NEREID_REGISTER_ONNX_OP("Dropout", "ratio seed", ConvertDropout);

}  // namespace nereid
