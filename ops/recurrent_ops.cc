// LstmLayer and GruLayer: one direction of an LSTM or a GRU over a whole
// sequence in one node, and their gradients through time. Gates are in
// ONNX's order (LSTM: i, o, f, c; GRU: z, r, h); the layout is time-major
// ([T, B, ...]) as ONNX's. The forward node also outputs what the backward
// pass needs (the activated gates of every step, and the LSTM's cell states
// or the GRU's reset term), so the gradient recomputes nothing.

#include <array>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

constexpr int kGates = 4;     // LSTM
constexpr int kGruGates = 3;  // GRU

// The [rows, cols] input i must agree with (rows, cols).
absl::Status RequireMatrix(const InferenceContext& c, int i, int64_t rows, int64_t cols) {
  const TensorShape& s = c.input_shape(i);
  if (s.rank() != 2 || !shape_fns::DimsAgree(s.dim(0), rows) || !shape_fns::DimsAgree(s.dim(1), cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape_fns::DescribeInput(c, i), " must be [", rows, ", ", cols, "]"));
  }
  return shape_fns::RequireSameDtype(c, 0, i);
}

// Checks x [T, B, I], w [G, I], r [G, H], bias [bias_rows] and the initial
// states (`states` tensors of [B, H], or none); returns T, B, H.
absl::StatusOr<std::array<int64_t, 3>> CheckRecurrentInputs(const InferenceContext& c, int gates, int64_t bias_rows,
                                                            int states) {
  RETURN_IF_ERROR(shape_fns::RequireRank(c, 0, 3, "[T, B, I] (time-major)"));
  const int64_t hidden = c.GetInt("hidden_size");
  if (hidden < 1) return absl::InvalidArgumentError(absl::StrCat("hidden_size must be >= 1, got ", hidden));
  const TensorShape& x = c.input_shape(0);
  const int64_t steps = x.dim(0), batch = x.dim(1);
  if (steps == kUnknownDim || x.dim(2) == kUnknownDim) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 0),
                                                   " must have a known length and input size"));
  }
  RETURN_IF_ERROR(RequireMatrix(c, 1, gates * hidden, x.dim(2)));
  RETURN_IF_ERROR(RequireMatrix(c, 2, gates * hidden, hidden));
  const TensorShape& bias = c.input_shape(3);
  if (bias.rank() != 1 || !shape_fns::DimsAgree(bias.dim(0), bias_rows)) {
    return absl::InvalidArgumentError(absl::StrCat(shape_fns::DescribeInput(c, 3), " must be [", bias_rows, "]"));
  }
  const int given = c.num_inputs() - 4;
  if (given != 0 && given != states) {
    return absl::InvalidArgumentError(absl::StrCat("initial_state takes ", states == 2 ? "h0 and c0" : "h0",
                                                   " or nothing (a zero state), got ", given, " tensors"));
  }
  for (int i = 4; i < c.num_inputs(); ++i) RETURN_IF_ERROR(RequireMatrix(c, i, batch, hidden));
  return std::array<int64_t, 3>{steps, batch, hidden};
}

absl::StatusOr<std::vector<ShapeAndType>> LstmLayerShape(const InferenceContext& c) {
  const int64_t hidden = c.GetInt("hidden_size");
  ASSIGN_OR_RETURN(auto sizes, CheckRecurrentInputs(c, kGates, kGates * hidden, 2));
  const int64_t steps = sizes[0], batch = sizes[1];
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

// The GRU's bias is ONNX's [Wb | Rb] ([6H]): with linear_before_reset the
// recurrent bias sits inside the reset gate's product.
absl::StatusOr<std::vector<ShapeAndType>> GruLayerShape(const InferenceContext& c) {
  const int64_t hidden = c.GetInt("hidden_size");
  ASSIGN_OR_RETURN(auto sizes, CheckRecurrentInputs(c, kGruGates, 2 * kGruGates * hidden, 1));
  const int64_t steps = sizes[0], batch = sizes[1];
  DataType t = c.input_dtype(0);
  TensorShape state({batch, hidden});
  return std::vector<ShapeAndType>{{TensorShape({steps, batch, hidden}), t},
                                   {state, t},
                                   {TensorShape({steps, batch, kGruGates * hidden}), t},
                                   {TensorShape({steps, batch, hidden}), t}};
}

int64_t GruLayerCost(const InferenceContext& c, const std::vector<ShapeAndType>& outputs) {
  const int64_t steps = c.input_shape(0).dim(0), in = c.input_shape(0).dim(2), hidden = c.GetInt("hidden_size");
  return cost_fns::SaturatingMul(steps, 2 * kGruGates * hidden * (in + hidden) + 10 * hidden);
}

// Adds a layer's gradient node `op`: `inputs` (x, w, r and what the forward
// pass saved), then the gradients that flow into outputs 0, 1, ... (one flag
// per output in `flags` says whether it flows) and the initial states given;
// `attrs` plus the flags. Returns dx, dw, dr, dbias and the initial states'.
absl::StatusOr<GradResult> AddRecurrentGrad(GradientBuilder& g, const char* op, std::vector<NodeOut> inputs,
                                            std::vector<std::pair<std::string, AttrValue>> attrs,
                                            const std::vector<const char*>& flags) {
  for (int port = 0; port < static_cast<int>(flags.size()); ++port) {
    const bool flows = g.has_output_grad(port);
    if (flows) {
      ASSIGN_OR_RETURN(NodeOut d, g.output_grad(port));
      inputs.push_back(d);
    }
    attrs.emplace_back(flags[port], BoolAttr(flows));
  }
  const int states = g.node().num_inputs() - 4;
  for (int i = 0; i < states; ++i) inputs.push_back(g.input(4 + i));
  ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", op, inputs, attrs));
  GradResult result = {dx, NodeOut{dx.node, 1}, NodeOut{dx.node, 2}, NodeOut{dx.node, 3}};
  for (int i = 0; i < states; ++i) result.push_back(NodeOut{dx.node, 4 + i});
  return result;
}

// GruLayerGrad's inputs: x, w, r, y, gates, reset_term, then the gradients
// that flow (dy, dh_last) and h0 if given.
absl::StatusOr<GradResult> GruLayerGradient(GradientBuilder& g) {
  return AddRecurrentGrad(g, "GruLayerGrad",
                          {g.input(0), g.input(1), g.input(2), g.output(0), g.output(2), g.output(3)},
                          {{"hidden_size", g.attr("hidden_size")},
                           {"reverse", g.attr("reverse")},
                           {"linear_before_reset", g.attr("linear_before_reset")}},
                          {"has_dy", "has_dh_last"});
}

absl::StatusOr<std::vector<ShapeAndType>> GruLayerGradShape(const InferenceContext& c) {
  DataType t = c.input_dtype(0);
  const TensorShape& x = c.input_shape(0);
  const int64_t hidden = c.GetInt("hidden_size");
  return std::vector<ShapeAndType>{{x, t},
                                   {c.input_shape(1), t},
                                   {c.input_shape(2), t},
                                   {TensorShape({2 * kGruGates * hidden}), t},
                                   {TensorShape({x.dim(1), hidden}), t}};
}

// LstmLayerGrad's inputs: x, w, r, y, gates, cells, then the gradients that
// flow (dy, dh_last, dc_last; flags say which) and the initial state if any.
absl::StatusOr<GradResult> LstmLayerGradient(GradientBuilder& g) {
  return AddRecurrentGrad(g, "LstmLayerGrad",
                          {g.input(0), g.input(1), g.input(2), g.output(0), g.output(3), g.output(4)},
                          {{"hidden_size", g.attr("hidden_size")}, {"reverse", g.attr("reverse")}},
                          {"has_dy", "has_dh_last", "has_dc_last"});
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

// What LstmLayer and GruLayer share: x, w, r, bias and the initial state in,
// y and h_last first out, hidden_size and reverse.
OpDefBuilder RecurrentLayerOp(const char* name, const char* summary) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Input("w", kFloatTypes)
      .Input("r", kFloatTypes)
      .Input("bias", kFloatTypes)
      .InputList("initial_state", 0, kFloatTypes)
      .Output("y")
      .Output("h_last")
      .RequiredAttr("hidden_size", AttrType::kInt)
      .Attr("reverse", AttrType::kBool, BoolAttr(false), "run from the last step to the first");
}

// What their gradients share: x, w, r, y, gates and `saved` (the per-step
// tensor the layer keeps), then the gradients that flow; dx, dw, dr, dbias
// and dh0 first out; hidden_size and reverse.
OpDefBuilder RecurrentGradOp(const char* name, const char* summary, const char* saved) {
  return OpDefBuilder(name)
      .Summary(summary)
      .Input("x", kFloatTypes)
      .Input("w", kFloatTypes)
      .Input("r", kFloatTypes)
      .Input("y", kFloatTypes)
      .Input("gates", kFloatTypes)
      .Input(saved, kFloatTypes)
      .InputList("flowing", 0, kFloatTypes)
      .Output("dx")
      .Output("dw")
      .Output("dr")
      .Output("dbias")
      .Output("dh0")
      .RequiredAttr("hidden_size", AttrType::kInt)
      .Attr("reverse", AttrType::kBool, BoolAttr(false))
      .NoGradient("a gradient op (no second derivatives)")
      .SetCostFn(cost_fns::NoFlops);
}

NEREID_REGISTER_OP(RecurrentLayerOp("LstmLayer",
                                    "One direction of an LSTM over x [T, B, I] (gates i, o, f, c as ONNX; w [4H, I], "
                                    "r [4H, H], bias [4H] = ONNX's Wb + Rb): y [T, B, H], the last h and c [B, H], "
                                    "and the activated gates and cell states of every step for the gradient.")
                       .Output("c_last")
                       .Output("gates")
                       .Output("cells")
                       .SetShapeFn(LstmLayerShape)
                       .SetCostFn(LstmLayerCost)
                       .SetGradient(LstmLayerGradient));

NEREID_REGISTER_OP(RecurrentGradOp("LstmLayerGrad", "Gradients of LstmLayer through time: dx, dw, dr, dbias, dh0, dc0.",
                                   "cells")
                       .Output("dc0")
                       .Attr("has_dy", AttrType::kBool, BoolAttr(true))
                       .Attr("has_dh_last", AttrType::kBool, BoolAttr(false))
                       .Attr("has_dc_last", AttrType::kBool, BoolAttr(false))
                       .SetShapeFn(LstmLayerGradShape));

NEREID_REGISTER_OP(RecurrentLayerOp("GruLayer",
                                    "One direction of a GRU over x [T, B, I] (gates z, r, h as ONNX; w [3H, I], "
                                    "r [3H, H], bias [6H] = ONNX's Wb then Rb): y [T, B, H], the last h [B, H], and "
                                    "the activated gates and the reset term of every step for the gradient.")
                       .Output("gates")
                       .Output("reset_term")
                       .Attr("linear_before_reset", AttrType::kBool, BoolAttr(false),
                             "apply the reset gate after the recurrent product (PyTorch's GRU), as ONNX's attribute")
                       .SetShapeFn(GruLayerShape)
                       .SetCostFn(GruLayerCost)
                       .SetGradient(GruLayerGradient));

NEREID_REGISTER_OP(RecurrentGradOp("GruLayerGrad", "Gradients of GruLayer through time: dx, dw, dr, dbias, dh0.",
                                   "reset_term")
                       .Attr("linear_before_reset", AttrType::kBool, BoolAttr(false))
                       .Attr("has_dy", AttrType::kBool, BoolAttr(true))
                       .Attr("has_dh_last", AttrType::kBool, BoolAttr(false))
                       .SetShapeFn(GruLayerGradShape));

}  // namespace
}  // namespace nereid
