// ONNX activations, Softmax, Add and Mul -> the Nereid ops of the same name.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

// One input, one output, no attributes: the op of the same meaning.
OnnxConverterFn Unary(const std::string& op) {
  return [op](OnnxNodeContext& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    c.SetOutput(0, c.AddNode(op, {x}));
    return absl::OkStatus();
  };
}

// NumPy broadcasting on both sides, as Nereid's Add and Mul do.
OnnxConverterFn Binary(const std::string& op) {
  return [op](OnnxNodeContext& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::string a, c.Input(0));
    ASSIGN_OR_RETURN(std::string b, c.Input(1));
    c.SetOutput(0, c.AddNode(op, {a, b}));
    return absl::OkStatus();
  };
}

// From opset 13 Softmax normalises along one axis, as Nereid's does. Before,
// it flattened the input to 2-D at `axis` (default 1): the same only when
// `axis` is the last dimension.
absl::Status ConvertSoftmax(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  int64_t axis = c.IntAttr("axis", c.opset() >= 13 ? -1 : 1);
  if (c.opset() < 13) {
    if (!dims) return c.Unsupported("the input's rank is unknown (opset < 13 Softmax depends on it)");
    const int64_t rank = static_cast<int64_t>(dims->size());
    if (axis < 0) axis += rank;
    if (axis != rank - 1) {
      return c.Unsupported(absl::StrCat("opset ", c.opset(), " Softmax over dimensions ", axis,
                                        ".. of a rank-", rank, " input (only the last is supported)"));
    }
    axis = -1;
  }
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  google::protobuf::Map<std::string, AttrValue> attrs;
  if (axis != -1) attrs["axis"] = IntAttrValue(axis);
  c.SetOutput(0, c.AddNode("Softmax", {x}, attrs));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("Relu", "", Unary("Relu"));
NEREID_REGISTER_ONNX_OP("Sigmoid", "", Unary("Sigmoid"));
NEREID_REGISTER_ONNX_OP("Tanh", "", Unary("Tanh"));
NEREID_REGISTER_ONNX_OP("Identity", "", Unary("Identity"));
NEREID_REGISTER_ONNX_OP("Softmax", "axis", ConvertSoftmax);
NEREID_REGISTER_ONNX_OP("Add", "", Binary("Add"));
NEREID_REGISTER_ONNX_OP("Mul", "", Binary("Mul"));

}  // namespace nereid
