// ONNX Flatten, Reshape, Concat, Constant and Dropout -> Flatten / Reshape,
// Concat, Const, Dropout. Shapes that ONNX passes as tensors must be
// constants here: Nereid's Reshape takes its target as an attribute.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

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

// ONNX's 0 copies the input's dimension: resolved here from the static
// shape, or to -1 for the batch dimension when nothing else is -1.
absl::Status ConvertReshape(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> target = c.ConstantInts(1);
  if (!target) return c.Unsupported("the target shape is computed at run time; Nereid needs it constant");
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  const bool allow_zero = c.IntAttr("allowzero", 0) != 0;
  bool has_minus_one = false;
  for (int64_t d : *target) has_minus_one |= d == -1;
  for (size_t i = 0; i < target->size(); ++i) {
    if ((*target)[i] != 0 || allow_zero) continue;
    if (!dims || i >= dims->size()) return c.Unsupported(absl::StrCat("dimension ", i, " copies an unknown input dimension"));
    if ((*dims)[i] >= 0) {
      (*target)[i] = (*dims)[i];
    } else if (!has_minus_one) {
      (*target)[i] = -1;
      has_minus_one = true;
    } else {
      return c.Unsupported(absl::StrCat("dimension ", i, " copies an input dimension that is not static"));
    }
  }
  if (allow_zero) {
    for (int64_t d : *target) {
      if (d == 0) return c.Unsupported("allowzero with a zero dimension (empty tensors are not supported)");
    }
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["shape"] = IntsAttrValue(*target);
  c.SetOutput(0, c.AddNode("Reshape", {x}, attrs));
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
NEREID_REGISTER_ONNX_OP("Concat", "axis", ConvertConcat);
NEREID_REGISTER_ONNX_OP("Constant", "value value_float value_floats value_int value_ints", ConvertConstant);
NEREID_REGISTER_ONNX_OP("Dropout", "ratio seed", ConvertDropout);

}  // namespace nereid
