// Copies between host memory and a device's (passes/place_pass.cc inserts
// them where an edge crosses from a node on the host to one on a device, or
// back). Both keep the value's shape and dtype. On the sim, the executor runs them
// as stream copies (schedulers/device_streams.h); their CPU kernels copy on
// the host, where a placed plan runs without a device.
//
// `device` names the device side of the copy ("sim:0", "cuda:0") for both:
// where CopyToDevice writes, and where CopyToHost reads.

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

absl::StatusOr<std::vector<ShapeAndType>> CopyShape(const InferenceContext& c) {
  const std::string& device = c.GetString("device");
  if (device.empty() || absl::StartsWith(device, "cpu")) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'device' must name a device (\"sim:0\", \"cuda:0\"), not \"", device, "\""));
  }
  return shape_fns::UnchangedShape(c);
}

// The gradient of a copy one way is the copy the other way, on the same device.
GradFn CopyBack(const char* op) {
  return [op](GradientBuilder& g) -> absl::StatusOr<GradResult> {
    ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
    ASSIGN_OR_RETURN(NodeOut dx, g.AddWithAttrsOf("x", op, {dy}, {"device"}));
    return GradResult{dx};
  };
}

OpDefBuilder CopyOp(const char* name, const char* summary, const char* gradient) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x")
      .Output("y")
      .RequiredAttr("device", AttrType::kString, "the device copied to or from (\"sim:0\", \"cuda:0\")")
      .SetShapeFn(CopyShape)
      .SetCostFn(cost_fns::NoFlops)
      .SetGradient(CopyBack(gradient));
}

NEREID_REGISTER_OP(CopyOp("CopyToDevice", "y = x, copied from host memory into `device`'s. Gradient: CopyToHost.",
                          "CopyToHost"));
NEREID_REGISTER_OP(CopyOp("CopyToHost", "y = x, copied from `device`'s memory into host memory. Gradient: "
                                        "CopyToDevice.",
                          "CopyToDevice"));

}  // namespace
}  // namespace nereid
