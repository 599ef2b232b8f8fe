// ONNX activations, elementwise arithmetic, Where, Cast, Softmax and
// LogSoftmax -> the Nereid ops of the same name. Nereid computes in floating
// point: an integer operand is refused, except a constant exponent of Pow and
// a constant condition of Where (made float), and Cast's own.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

absl::Status RequireFloat(OnnxNodeContext& c, int i) {
  std::optional<int32_t> type = c.InputElemType(i);
  if (type && *type != onnx::TensorProto::FLOAT && *type != onnx::TensorProto::DOUBLE) {
    return c.Unsupported(absl::StrCat("input ", i, " is ",
                                      onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(*type)),
                                      "; Nereid's arithmetic is floating point"));
  }
  return absl::OkStatus();
}

// One input, one output, no attributes: the op of the same meaning.
OnnxConverterFn Unary(const std::string& op, bool float_only = true) {
  return [op, float_only](OnnxNodeContext& c) -> absl::Status {
    if (float_only) RETURN_IF_ERROR(RequireFloat(c, 0));
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    c.SetOutput(0, c.AddNode(op, {x}));
    return absl::OkStatus();
  };
}

// NumPy broadcasting on both sides, as Nereid's binary ops do.
OnnxConverterFn Binary(const std::string& op) {
  return [op](OnnxNodeContext& c) -> absl::Status {
    RETURN_IF_ERROR(RequireFloat(c, 0));
    RETURN_IF_ERROR(RequireFloat(c, 1));
    ASSIGN_OR_RETURN(std::string a, c.Input(0));
    ASSIGN_OR_RETURN(std::string b, c.Input(1));
    c.SetOutput(0, c.AddNode(op, {a, b}));
    return absl::OkStatus();
  };
}

// ONNX lets Pow's exponent be an integer tensor; a constant one becomes a
// float constant (x ** 2 in PyTorch's LayerNorm export).
absl::Status ConvertPow(OnnxNodeContext& c) {
  RETURN_IF_ERROR(RequireFloat(c, 0));
  ASSIGN_OR_RETURN(std::string a, c.Input(0));
  std::string b;
  if (RequireFloat(c, 1).ok()) {
    ASSIGN_OR_RETURN(b, c.Input(1));
  } else {
    std::optional<std::vector<float>> values = c.ConstantFloats(1);
    std::optional<std::vector<int64_t>> dims = c.InputDims(1);
    if (!values || !dims) return c.Unsupported("an integer exponent computed at run time");
    b = c.AddFloatConstant(*values, *dims, "exponent");
  }
  c.SetOutput(0, c.AddNode("Pow", {a, b}));
  return absl::OkStatus();
}

// Bounds are attributes before opset 11 and optional constant inputs after.
absl::Status ConvertClip(OnnxNodeContext& c) {
  RETURN_IF_ERROR(RequireFloat(c, 0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  const char* names[] = {"min", "max"};
  for (int i = 0; i < 2; ++i) {
    if (c.opset() < 11) {
      if (c.HasAttr(names[i])) attrs[names[i]] = FloatAttrValue(c.FloatAttr(names[i], 0));
      continue;
    }
    if (!c.HasInput(i + 1)) continue;
    std::optional<std::vector<float>> bound = c.ConstantFloats(i + 1);
    if (!bound || bound->size() != 1) return c.Unsupported(absl::StrCat("the ", names[i], " must be a constant scalar"));
    attrs[names[i]] = FloatAttrValue((*bound)[0]);
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  c.SetOutput(0, c.AddNode("Clip", {x}, attrs));
  return absl::OkStatus();
}

absl::Status ConvertHardSigmoid(OnnxNodeContext& c) {
  RETURN_IF_ERROR(RequireFloat(c, 0));
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["alpha"] = FloatAttrValue(c.FloatAttr("alpha", 0.2f));
  attrs["beta"] = FloatAttrValue(c.FloatAttr("beta", 0.5f));
  c.SetOutput(0, c.AddNode("HardSigmoid", {x}, attrs));
  return absl::OkStatus();
}

// From opset 13 Softmax normalises along one axis, as Nereid's does. Before,
// it flattened the input to 2-D at `axis` (default 1): the same only when
// `axis` is the last dimension.
OnnxConverterFn SoftmaxLike(const std::string& op) {
  return [op](OnnxNodeContext& c) -> absl::Status {
    std::optional<std::vector<int64_t>> dims = c.InputDims(0);
    int64_t axis = c.IntAttr("axis", c.opset() >= 13 ? -1 : 1);
    if (c.opset() < 13) {
      if (!dims) return c.Unsupported("the input's rank is unknown (opset < 13 Softmax depends on it)");
      const int64_t rank = static_cast<int64_t>(dims->size());
      if (axis < 0) axis += rank;
      if (axis != rank - 1) {
        return c.Unsupported(absl::StrCat("opset ", c.opset(), " ", op, " over dimensions ", axis,
                                          ".. of a rank-", rank, " input (only the last is supported)"));
      }
      axis = -1;
    }
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    google::protobuf::Map<std::string, AttrValue> attrs;
    if (axis != -1) attrs["axis"] = IntAttrValue(axis);
    c.SetOutput(0, c.AddNode(op, {x}, attrs));
    return absl::OkStatus();
  };
}

// Where's condition is boolean in ONNX; Nereid's is float (non-zero: true),
// so a constant one (a causal or padding mask) becomes a float constant. A
// condition computed at run time would need ONNX's comparisons, which are
// folded at import but have no kernels.
absl::Status ConvertWhere(OnnxNodeContext& c) {
  RETURN_IF_ERROR(RequireFloat(c, 1));
  RETURN_IF_ERROR(RequireFloat(c, 2));
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  std::optional<std::vector<float>> values = c.ConstantFloats(0);
  if (!values) {  // a mask folded at import (a comparison of constants)
    std::optional<std::vector<std::optional<int64_t>>> folded = c.PartialInts(0);
    if (folded && std::all_of(folded->begin(), folded->end(), [](const auto& v) { return v.has_value(); })) {
      values.emplace();
      for (const auto& v : *folded) values->push_back(static_cast<float>(*v));
    }
  }
  if (!values || !dims) return c.Unsupported("a condition computed at run time (Nereid's Where takes a constant mask)");
  std::string condition = c.AddFloatConstant(*values, *dims, "condition");
  ASSIGN_OR_RETURN(std::string x, c.Input(1));
  ASSIGN_OR_RETURN(std::string y, c.Input(2));
  c.SetOutput(0, c.AddNode("Where", {condition, x, y}));
  return absl::OkStatus();
}

// Between float32, int32 and int64; a Cast to the type the input already
// has is an Identity.
absl::Status ConvertCast(OnnxNodeContext& c) {
  auto nereid_type = [](int64_t onnx_type) -> std::optional<DataType> {
    switch (onnx_type) {
      case onnx::TensorProto::FLOAT:
        return DT_FLOAT;
      case onnx::TensorProto::INT32:
        return DT_INT32;
      case onnx::TensorProto::INT64:
        return DT_INT64;
      default:
        return std::nullopt;
    }
  };
  const int64_t to_onnx = c.IntAttr("to", onnx::TensorProto::UNDEFINED);
  std::optional<DataType> to = nereid_type(to_onnx);
  if (!to) {
    return c.Unsupported(absl::StrCat("a cast to ", onnx::TensorProto::DataType_Name(
                                                        static_cast<onnx::TensorProto::DataType>(to_onnx)),
                                      " (Nereid casts between float32, int32 and int64)"));
  }
  std::optional<int32_t> from_onnx = c.InputElemType(0);
  std::optional<DataType> from = from_onnx ? nereid_type(*from_onnx) : std::nullopt;
  if (from_onnx && !from) {
    return c.Unsupported(absl::StrCat("a cast from ", onnx::TensorProto::DataType_Name(
                                                          static_cast<onnx::TensorProto::DataType>(*from_onnx))));
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  if (from == to) {
    c.SetOutput(0, c.AddNode("Identity", {x}));
    return absl::OkStatus();
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["to"].set_type(*to);
  c.SetOutput(0, c.AddNode("Cast", {x}, attrs));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("Where", "", ConvertWhere);
NEREID_REGISTER_ONNX_OP("Cast", "to", ConvertCast);
NEREID_REGISTER_ONNX_OP("Relu", "", Unary("Relu"));
NEREID_REGISTER_ONNX_OP("Sigmoid", "", Unary("Sigmoid"));
NEREID_REGISTER_ONNX_OP("Tanh", "", Unary("Tanh"));
NEREID_REGISTER_ONNX_OP("Identity", "", Unary("Identity", /*float_only=*/false));
NEREID_REGISTER_ONNX_OP("Sqrt", "", Unary("Sqrt"));
NEREID_REGISTER_ONNX_OP("Reciprocal", "", Unary("Reciprocal"));
NEREID_REGISTER_ONNX_OP("Exp", "", Unary("Exp"));
NEREID_REGISTER_ONNX_OP("Log", "", Unary("Log"));
NEREID_REGISTER_ONNX_OP("Neg", "", Unary("Neg"));
NEREID_REGISTER_ONNX_OP("Erf", "", Unary("Erf"));
NEREID_REGISTER_ONNX_OP("HardSwish", "", Unary("HardSwish"));
NEREID_REGISTER_ONNX_OP("HardSigmoid", "alpha beta", ConvertHardSigmoid);
NEREID_REGISTER_ONNX_OP("Clip", "min max", ConvertClip);
NEREID_REGISTER_ONNX_OP("Softmax", "axis", SoftmaxLike("Softmax"));
NEREID_REGISTER_ONNX_OP("LogSoftmax", "axis", SoftmaxLike("LogSoftmax"));
NEREID_REGISTER_ONNX_OP("Add", "", Binary("Add"));
NEREID_REGISTER_ONNX_OP("Sub", "", Binary("Sub"));
NEREID_REGISTER_ONNX_OP("Mul", "", Binary("Mul"));
NEREID_REGISTER_ONNX_OP("Div", "", Binary("Div"));
NEREID_REGISTER_ONNX_OP("Pow", "", ConvertPow);

}  // namespace nereid
