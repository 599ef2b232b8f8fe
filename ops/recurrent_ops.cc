// LstmLayer: one direction of an LSTM over a whole sequence in one node, and
// its gradient through time. Gates are in ONNX's order (i, o, f, c); the
// layout is time-major ([T, B, ...]) as ONNX's LSTM. The forward node also
// outputs what the backward pass needs (the activated gates and the cell
// states of every step), so the gradient recomputes nothing.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

constexpr int kGates = 4;

// The [rows, cols] input i must agree with (rows, cols).
absl::Status RequireMatrix(const InferenceContext& c, int i, int64_t rows, int64_t cols) {
  const TensorShape& s = c.input_shape(i);
  if (s.rank() != 2 || !shape_fns::DimsAgree(s.dim(0), rows) || !shape_fns::DimsAgree(s.dim(1), cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape_fns::DescribeInput(c, i), " must be [", rows, ", ", cols, "]"));
  }
  return shape_fns::RequireSameDtype(c, 0, i);
}

absl::StatusOr<std::vector<ShapeAndType>> LstmLayerShape(const InferenceContext& c) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 3, "[T, B, I] (time-major)"));
  const int64_t hidden = c.GetInt("hidden_size");
  if (hidden < 1) return absl::InvalidArgumentError(absl::StrCat("hidden_size must be >= 1, got ", hidden));
  const TensorShape& x = c.input_shape(0);
  const int64_t steps = x.dim(0), batch = x.dim(1);
  if (steps == kUnknownDim || x.dim(2) == kUnknownDim) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0),
                                                   " must have a known length and input size"));
  }
  RETURN_IF_ERROR(RequireMatrix(c, 1, kGates * hidden, x.dim(2)));
  RETURN_IF_ERROR(RequireMatrix(c, 2, kGates * hidden, hidden));
  const TensorShape& bias = c.input_shape(3);
  if (bias.rank() != 1 || !shape_fns::DimsAgree(bias.dim(0), kGates * hidden)) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 3), " must be [", kGates * hidden, "]"));
  }
  const int states = c.num_inputs() - 4;
  if (states != 0 && states != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial_state takes h0 and c0 or nothing (a zero state), got ", states, " tensors"));
  }
  for (int i = 4; i < c.num_inputs(); ++i) RETURN_IF_ERROR(RequireMatrix(c, i, batch, hidden));
  DataType t = c.input_dtype(0);
  TensorShape state({batch, hidden});
  return std::vector<ShapeAndType>{{TensorShape({steps, batch, hidden}), t},
                                   {state, t},
                                   {state, t},
                                   {TensorShape({steps, batch, kGates * hidden}), t},
                                   {TensorShape({steps, batch, hidden}), t}};
}

// Two multiply-adds per weight per example and step, plus the gate updates.
int64_t LstmLayerCost(const InferenceContext& c, const std::vector<ShapeAndType>& outputs) {
  const int64_t steps = c.input_shape(0).dim(0), in = c.input_shape(0).dim(2), hidden = c.GetInt("hidden_size");
  return cost_fns::SaturatingMul(steps, 2 * kGates * hidden * (in + hidden) + 12 * hidden);
}

// LstmLayerGrad's inputs: x, w, r, y, gates, cells, then the gradients that
// flow (dy, dh_last, dc_last; flags say which) and the initial state if any.
absl::StatusOr<GradResult> LstmLayerGradient(GradientBuilder& g) {
  std::vector<NodeOut> inputs = {g.input(0), g.input(1), g.input(2), g.output(0), g.output(3), g.output(4)};
  std::vector<std::pair<std::string, AttrValue>> attrs = {{"hidden_size", g.attr("hidden_size")},
                                                          {"reverse", g.attr("reverse")}};
  const char* flags[] = {"has_dy", "has_dh_last", "has_dc_last"};
  for (int port = 0; port < 3; ++port) {
    const bool flows = g.has_output_grad(port);
    if (flows) {
      ASSIGN_OR_RETURN(NodeOut d, g.output_grad(port));
      inputs.push_back(d);
    }
    attrs.emplace_back(flags[port], BoolAttr(flows));
  }
  const int states = g.node().num_inputs() - 4;
  for (int i = 0; i < states; ++i) inputs.push_back(g.input(4 + i));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "LstmLayerGrad", inputs, attrs));
  GradResult result = {dx, NodeOut{dx.node, 1}, NodeOut{dx.node, 2}, NodeOut{dx.node, 3}};
  if (states == 2) {
    result.push_back(NodeOut{dx.node, 4});
    result.push_back(NodeOut{dx.node, 5});
  }
  return result;
}

absl::StatusOr<std::vector<ShapeAndType>> LstmLayerGradShape(const InferenceContext& c) {
  DataType t = c.input_dtype(0);
  const TensorShape& x = c.input_shape(0);
  const TensorShape& w = c.input_shape(1);
  const TensorShape& r = c.input_shape(2);
  TensorShape state({x.dim(1), c.GetInt("hidden_size")});
  return std::vector<ShapeAndType>{
      {x, t}, {w, t}, {r, t}, {TensorShape({w.dim(0)}), t}, {state, t}, {state, t}};
}

NEREID_REGISTER_OP(OpDefBuilder("LstmLayer")
                       .Summary("One direction of an LSTM over x [T, B, I] (gates i, o, f, c as ONNX; w [4H, I], "
                                "r [4H, H], bias [4H] = ONNX's Wb + Rb): y [T, B, H], the last h and c [B, H], "
                                "and the activated gates and cell states of every step for the gradient.")
                       .Input("x", kFloatTypes)
                       .Input("w", kFloatTypes)
                       .Input("r", kFloatTypes)
                       .Input("bias", kFloatTypes)
                       .InputList("initial_state", 0, kFloatTypes)
                       .Output("y")
                       .Output("h_last")
                       .Output("c_last")
                       .Output("gates")
                       .Output("cells")
                       .RequiredAttr("hidden_size", AttrType::kInt)
                       .Attr("reverse", AttrType::kBool, BoolAttr(false), "run from the last step to the first")
                       .SetShapeFn(LstmLayerShape)
                       .SetCostFn(LstmLayerCost)
                       .SetGradient(LstmLayerGradient));

NEREID_REGISTER_OP(OpDefBuilder("LstmLayerGrad")
                       .Summary("Gradients of LstmLayer through time: dx, dw, dr, dbias, dh0, dc0.")
                       .Input("x", kFloatTypes)
                       .Input("w", kFloatTypes)
                       .Input("r", kFloatTypes)
                       .Input("y", kFloatTypes)
                       .Input("gates", kFloatTypes)
                       .Input("cells", kFloatTypes)
                       .InputList("flowing", 0, kFloatTypes)
                       .Output("dx")
                       .Output("dw")
                       .Output("dr")
                       .Output("dbias")
                       .Output("dh0")
                       .Output("dc0")
                       .RequiredAttr("hidden_size", AttrType::kInt)
                       .Attr("reverse", AttrType::kBool, BoolAttr(false))
                       .Attr("has_dy", AttrType::kBool, BoolAttr(true))
                       .Attr("has_dh_last", AttrType::kBool, BoolAttr(false))
                       .Attr("has_dc_last", AttrType::kBool, BoolAttr(false))
                       .NoGradient("a gradient op (no second derivatives)")
                       .SetShapeFn(LstmLayerGradShape)
                       .SetCostFn(cost_fns::NoFlops));

}  // namespace
}  // namespace nereid
