// ONNX LayerNormalization -> LayerNorm (with its mean and inverse standard
// deviation outputs); a missing bias becomes zeros.
// ONNX BatchNormalization (either training_mode) -> BatchNorm. The running mean and variance become
// Parameters that are not trained. ONNX's momentum weighs the old running
// value; Nereid's weighs the batch statistic, hence 1 - momentum.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

absl::Status ConvertBatchNormalization(OnnxNodeContext& c) {
  // training_mode 1 (opset 14+ exports of a module in train mode) is what
  // Nereid's BatchNorm does while training; it uses the running statistics
  // when evaluating, as the module does in eval mode.
  if (c.IntAttr("spatial", 1) != 1) return c.Unsupported("spatial 0 (per-element statistics) is not supported");
  for (int i = 1; i < 5; ++i) {
    if (c.OutputUsed(i)) return c.Unsupported(absl::StrCat("output ", i, " (running or saved statistics) is not supported"));
  }
  std::vector<std::string> inputs;
  for (int i = 0; i < 5; ++i) {
    ASSIGN_OR_RETURN(std::string in, i < 3 ? c.Input(i) : c.StateInput(i));
    inputs.push_back(in);
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["epsilon"] = FloatAttrValue(c.FloatAttr("epsilon", 1e-5f));
  attrs["momentum"] = FloatAttrValue(1.0f - c.FloatAttr("momentum", 0.9f));
  c.SetOutput(0, c.AddNode("BatchNorm", inputs, attrs));
  return absl::OkStatus();
}

absl::Status ConvertLayerNormalization(OnnxNodeContext& c) {
  if (c.IntAttr("stash_type", 1) != 1) return c.Unsupported("statistics kept in a type other than float");
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  ASSIGN_OR_RETURN(std::string scale, c.Input(1));
  std::string bias;
  if (c.HasInput(2)) {
    ASSIGN_OR_RETURN(bias, c.Input(2));
  } else {
    std::optional<std::vector<int64_t>> dims = c.InputDims(1);
    int64_t n = 1;
    for (int64_t d : dims ? *dims : std::vector<int64_t>{-1}) n = d < 0 ? -1 : n * d;
    if (!dims || n < 0) return c.Unsupported("no bias, and the scale's shape is unknown");
    bias = c.AddFloatConstant(std::vector<float>(n, 0.0f), *dims, "zero_bias");
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["axis"] = IntAttrValue(c.IntAttr("axis", -1));
  attrs["epsilon"] = FloatAttrValue(c.FloatAttr("epsilon", 1e-5f));
  const std::string node = c.AddNode("LayerNorm", {x, scale, bias}, attrs);
  c.SetOutput(0, node);
  c.SetOutput(1, absl::StrCat(node, ":1"));
  c.SetOutput(2, absl::StrCat(node, ":2"));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("LayerNormalization", "axis epsilon stash_type", ConvertLayerNormalization);
NEREID_REGISTER_ONNX_OP("BatchNormalization", "epsilon momentum training_mode spatial", ConvertBatchNormalization);

}  // namespace nereid
