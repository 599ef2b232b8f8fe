// ONNX BatchNormalization -> BatchNorm. The running mean and variance become
// Parameters that are not trained. ONNX's momentum weighs the old running
// value; Nereid's weighs the batch statistic, hence 1 - momentum.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

absl::Status ConvertBatchNormalization(OnnxNodeContext& c) {
  if (c.IntAttr("training_mode", 0) != 0) {
    return c.Unsupported("training_mode 1 (Nereid uses batch statistics while training on its own)");
  }
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

}  // namespace

NEREID_REGISTER_ONNX_OP("BatchNormalization", "epsilon momentum training_mode spatial", ConvertBatchNormalization);

}  // namespace nereid
