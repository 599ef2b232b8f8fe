// ONNX ReduceSum, ReduceMean and ReduceMax -> the Nereid ops of the same name.
// The axes are an attribute up to opset 12 (ReduceSum) or 17 (the others)
// and a constant input after; no axes reduce everything, unless
// noop_with_empty_axes asks for the input unchanged.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

OnnxConverterFn Reduce(const std::string& op) {
  return [op](OnnxNodeContext& c) -> absl::Status {
    std::optional<int32_t> type = c.InputElemType(0);
    if (type && *type != onnx::TensorProto::FLOAT) return c.Unsupported("only float data is reduced");
    std::vector<int64_t> axes = c.IntsAttr("axes");
    if (c.HasInput(1)) {
      std::optional<std::vector<int64_t>> given = c.ConstantInts(1);
      if (!given) return c.Unsupported("the axes are computed at run time; Nereid needs them constant");
      axes = *given;
    }
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    if (axes.empty() && c.IntAttr("noop_with_empty_axes", 0) != 0) {
      c.SetOutput(0, x);
      return absl::OkStatus();
    }
    google::protobuf::Map<std::string, AttrValue> attrs;
    if (!axes.empty()) attrs["axes"] = IntsAttrValue(axes);  // none: every axis
    attrs["keepdims"] = BoolAttrValue(c.IntAttr("keepdims", 1) != 0);
    c.SetOutput(0, c.AddNode(op, {x}, attrs));
    return absl::OkStatus();
  };
}

}  // namespace

NEREID_REGISTER_ONNX_OP("ReduceSum", "axes keepdims noop_with_empty_axes", Reduce("ReduceSum"));
NEREID_REGISTER_ONNX_OP("ReduceMean", "axes keepdims", Reduce("ReduceMean"));
NEREID_REGISTER_ONNX_OP("ReduceMax", "axes keepdims", Reduce("ReduceMax"));

}  // namespace nereid
