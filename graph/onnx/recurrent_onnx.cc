// ONNX LSTM and GRU. An LSTM direction is one LstmLayer node (the whole
// sequence and its gradient through time in one kernel). A GRU is unrolled
// over the (static) sequence: one BatchMatMul computes every step's input
// projection, then each step is a MatMul of the previous hidden state, gate
// Slices, Sigmoid / Tanh and the elementwise updates, and its backward pass
// is autodiff's over the same ops (no fused GRU kernel yet). Gate orders are
// ONNX's (LSTM: i, o, f, c; GRU: z, r, h); forward, reverse and
// bidirectional; a zero initial state (what PyTorch exports as zeros
// expanded to the batch) starts the recurrence without a matrix product.
// Not supported: peepholes, sequence_lens, clip, input_forget, activations
// other than the defaults, batch-first layout 1.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

constexpr int64_t kMaxUnrolledSteps = 1024;

google::protobuf::Map<std::string, AttrValue> Attrs(
    std::initializer_list<std::pair<const char*, AttrValue>> values) {
  google::protobuf::Map<std::string, AttrValue> attrs;
  for (const auto& [k, v] : values) attrs[k] = v;
  return attrs;
}

// The nodes of one direction: names under "dN/", its slice of the weights.
struct Cell {
  OnnxNodeContext* c;
  std::string dir;  // suffix prefix: "d0", "d1"
  int64_t hidden;

  std::string Add(const std::string& op, const std::vector<std::string>& in,
                  const google::protobuf::Map<std::string, AttrValue>& attrs, const std::string& suffix) const {
    return c->AddNode(op, in, attrs, absl::StrCat(dir, "/", suffix));
  }
  // Columns [k*H, (k+1)*H) of the last axis: gate k.
  std::string Gate(const std::string& x, int k, const std::string& suffix) const {
    return Add("Slice", {x}, Attrs({{"axis", IntAttrValue(-1)}, {"begin", IntAttrValue(k * hidden)},
                                    {"size", IntAttrValue(hidden)}}),
               suffix);
  }
  // Direction d's [rows, cols] matrix of a [directions, rows, cols] weight.
  std::string Matrix(const std::string& w, int d, int64_t rows, int64_t cols, const std::string& suffix) const {
    std::string one = Add("Slice", {w}, Attrs({{"axis", IntAttrValue(0)}, {"begin", IntAttrValue(d)},
                                               {"size", IntAttrValue(1)}}),
                          suffix + "_slice");
    return Add("Reshape", {one}, Attrs({{"shape", IntsAttrValue({rows, cols})}}), suffix);
  }
};

// What both ops read from the ONNX node, checked.
struct Recurrent {
  int directions = 1;
  bool reverse = false;  // direction "reverse" (bidirectional: direction 1 runs backward)
  int64_t steps = 0, in = 0, hidden = 0;
  std::string x, w, r;
  std::optional<std::string> bias, h0, c0;  // absent or known to be zero: nullopt

  bool Backward(int d) const { return reverse || d == 1; }
};

absl::StatusOr<Recurrent> ReadRecurrent(OnnxNodeContext& c, bool has_cell_state) {
  if (c.IntAttr("layout", 0) != 0) return c.Unsupported("layout 1 (batch first)");
  if (c.HasAttr("clip")) return c.Unsupported("clip");
  if (c.IntAttr("input_forget", 0) != 0) return c.Unsupported("input_forget");
  if (c.HasAttr("activations") || c.HasAttr("activation_alpha") || c.HasAttr("activation_beta")) {
    return c.Unsupported("activations other than the defaults");
  }
  if (c.HasInput(4)) return c.Unsupported("sequence_lens (every sequence must have the full length)");
  if (has_cell_state && c.HasInput(7)) return c.Unsupported("peepholes");
  const std::string direction = c.StringAttr("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return c.Malformed(absl::StrCat("unknown direction '", direction, "'"));
  }
  Recurrent rec;
  rec.directions = direction == "bidirectional" ? 2 : 1;
  rec.reverse = direction == "reverse";
  rec.hidden = c.IntAttr("hidden_size", -1);
  std::optional<std::vector<int64_t>> x_dims = c.InputDims(0);
  if (!x_dims || x_dims->size() != 3) return c.Unsupported("the input's shape is unknown or not [T, B, I]");
  rec.steps = (*x_dims)[0];
  rec.in = (*x_dims)[2];
  if (rec.steps < 1 || rec.in < 1) return c.Unsupported("the sequence length and input size must be static");
  if (rec.hidden < 1) return c.Malformed("hidden_size is required");
  ASSIGN_OR_RETURN(rec.x, c.Input(0));
  ASSIGN_OR_RETURN(rec.w, c.Input(1));
  ASSIGN_OR_RETURN(rec.r, c.Input(2));
  if (c.HasInput(3)) {
    ASSIGN_OR_RETURN(rec.bias, c.Input(3));
  }
  // Initial states: zeros (absent, or known to be 0) or a value.
  auto initial = [&](int input) -> absl::StatusOr<std::optional<std::string>> {
    if (!c.HasInput(input)) return std::optional<std::string>();
    std::optional<float> uniform = c.UniformInput(input);
    if (uniform && *uniform == 0.0f) return std::optional<std::string>();
    ASSIGN_OR_RETURN(std::string v, c.Input(input));
    return std::optional<std::string>(v);
  };
  ASSIGN_OR_RETURN(rec.h0, initial(5));
  if (has_cell_state) {
    ASSIGN_OR_RETURN(rec.c0, initial(6));
  }
  return rec;
}

// Y [T, directions, B, H] from each direction's [T, B, H]; Y_h and Y_c
// [directions, B, H] from each direction's [B, H].
void SetOutputs(OnnxNodeContext& c, const Recurrent& rec, const std::vector<std::string>& ys,
                const std::vector<std::string>& last_h, const std::vector<std::string>& last_c) {
  auto stack = [&](const std::vector<std::string>& parts, std::vector<int64_t> shape, int64_t axis, const char* name) {
    std::vector<std::string> shaped;
    for (size_t d = 0; d < parts.size(); ++d) {
      shaped.push_back(c.AddNode("Reshape", {parts[d]}, Attrs({{"shape", IntsAttrValue(shape)}}),
                                 absl::StrCat(name, "/d", d)));
    }
    return shaped.size() == 1 ? shaped[0]
                              : c.AddNode("Concat", shaped, Attrs({{"axis", IntAttrValue(axis)}}), name);
  };
  if (c.OutputUsed(0)) c.SetOutput(0, stack(ys, {rec.steps, 1, -1, rec.hidden}, 1, "y"));
  if (c.OutputUsed(1)) c.SetOutput(1, stack(last_h, {1, -1, rec.hidden}, 0, "y_h"));
  if (!last_c.empty() && c.OutputUsed(2)) c.SetOutput(2, stack(last_c, {1, -1, rec.hidden}, 0, "y_c"));
}

// Direction d's bias halves: ONNX's [directions, 2G] holds Wb then Rb.
std::pair<std::string, std::string> BiasHalves(const Cell& cell, const std::string& bias, int d, int64_t g) {
  std::string b = cell.Matrix(bias, d, 1, 2 * g, "b");
  auto half = [&](int64_t begin, const char* name) {
    return cell.Add("Reshape",
                    {cell.Add("Slice", {b}, Attrs({{"axis", IntAttrValue(1)}, {"begin", IntAttrValue(begin)},
                                                   {"size", IntAttrValue(g)}}), absl::StrCat(name, "_slice"))},
                    Attrs({{"shape", IntsAttrValue({g})}}), name);
  };
  return {half(0, "wb"), half(g, "rb")};
}

absl::Status ConvertLstm(OnnxNodeContext& c) {
  ASSIGN_OR_RETURN(Recurrent rec, ReadRecurrent(c, /*has_cell_state=*/true));
  if (rec.h0.has_value() != rec.c0.has_value()) {
    // LstmLayer takes both initial states or neither; a zero one is passed as given.
    const int missing = rec.h0 ? 6 : 5;
    if (!c.HasInput(missing)) return c.Unsupported("an initial h without an initial c (or c without h)");
    ASSIGN_OR_RETURN(std::string zero_state, c.Input(missing));
    (rec.h0 ? rec.c0 : rec.h0) = zero_state;
  }
  const int64_t g = 4 * rec.hidden;
  std::vector<std::string> ys, last_h, last_c;
  for (int d = 0; d < rec.directions; ++d) {
    Cell cell{&c, absl::StrCat("d", d), rec.hidden};
    std::vector<std::string> inputs = {rec.x, cell.Matrix(rec.w, d, g, rec.in, "w"),
                                       cell.Matrix(rec.r, d, g, rec.hidden, "r")};
    if (rec.bias) {
      auto [wb, rb] = BiasHalves(cell, *rec.bias, d, g);
      inputs.push_back(cell.Add("Add", {wb, rb}, {}, "bias"));
    } else {
      inputs.push_back(c.AddFloatConstant(std::vector<float>(g, 0.0f), {g}, absl::StrCat("d", d, "/bias")));
    }
    if (rec.h0) {
      inputs.push_back(cell.Matrix(*rec.h0, d, -1, rec.hidden, "h0"));
      inputs.push_back(cell.Matrix(*rec.c0, d, -1, rec.hidden, "c0"));
    }
    std::string layer = cell.Add("LstmLayer", inputs,
                                 Attrs({{"hidden_size", IntAttrValue(rec.hidden)},
                                        {"reverse", BoolAttrValue(rec.Backward(d))}}),
                                 "lstm");
    ys.push_back(layer);
    last_h.push_back(layer + ":1");
    last_c.push_back(layer + ":2");
  }
  SetOutputs(c, rec, ys, last_h, last_c);
  return absl::OkStatus();
}

absl::Status ConvertGru(OnnxNodeContext& c) {
  ASSIGN_OR_RETURN(Recurrent rec, ReadRecurrent(c, /*has_cell_state=*/false));
  if (rec.steps > kMaxUnrolledSteps) {
    return c.Unsupported(absl::StrCat(rec.steps, " steps (GRU sequences are unrolled, up to ", kMaxUnrolledSteps, ")"));
  }
  const int64_t hidden = rec.hidden, steps = rec.steps, g = 3 * hidden;
  const bool linear_before_reset = c.IntAttr("linear_before_reset", 0) != 0;
  std::vector<std::string> ys, last_h;
  for (int d = 0; d < rec.directions; ++d) {
    Cell cell{&c, absl::StrCat("d", d), hidden};
    std::string rd = cell.Matrix(rec.r, d, g, hidden, "r");
    // Input projections of every step at once: [T, B, G].
    std::string gx = cell.Add("BatchMatMul", {rec.x, cell.Matrix(rec.w, d, g, rec.in, "w")},
                              Attrs({{"transpose_b", BoolAttrValue(true)}}), "x_proj");
    std::optional<std::string> rec_bias;  // added to the recurrent product
    if (rec.bias) {
      auto [wb, rb] = BiasHalves(cell, *rec.bias, d, g);
      gx = cell.Add("Add", {gx, wb}, {}, "x_proj_bias");
      rec_bias = rb;
    }
    std::optional<std::string> h;
    if (rec.h0) h = cell.Matrix(*rec.h0, d, -1, hidden, "h0");
    std::vector<std::string> per_step(steps);
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = rec.Backward(d) ? steps - 1 - i : i;
      const std::string at = absl::StrCat("t", t, "/");
      std::string xt = cell.Add("Reshape", {cell.Add("Slice", {gx}, Attrs({{"axis", IntAttrValue(0)}, {"begin", IntAttrValue(t)},
                                                                         {"size", IntAttrValue(1)}}), at + "x_slice")},
                                Attrs({{"shape", IntsAttrValue({-1, g})}}), at + "x");
      // rec = h R^T + Rb ([B, 3H]), or Rb alone from a zero state.
      std::optional<std::string> recurrent;
      if (h) {
        std::string rz = cell.Add("MatMul", {*h, rd}, Attrs({{"transpose_b", BoolAttrValue(true)}}), at + "h_proj");
        recurrent = rec_bias ? cell.Add("Add", {rz, *rec_bias}, {}, at + "h_proj_bias") : rz;
      } else {
        recurrent = rec_bias;
      }
      auto plus_rec = [&](int k, const char* name) {
        std::string xk = cell.Gate(xt, k, at + name + "_x");
        return recurrent ? cell.Add("Add", {xk, cell.Gate(*recurrent, k, at + name + "_h")}, {}, at + name + "_pre")
                         : xk;
      };
      std::string z = cell.Add("Sigmoid", {plus_rec(0, "z")}, {}, at + "z");
      std::string rg = cell.Add("Sigmoid", {plus_rec(1, "r")}, {}, at + "r");
      std::string xh = cell.Gate(xt, 2, at + "hx");
      std::string pre;
      if (linear_before_reset) {
        pre = recurrent ? cell.Add("Add", {xh, cell.Add("Mul", {rg, cell.Gate(*recurrent, 2, at + "hh")}, {},
                                                       at + "r_times_hh")}, {}, at + "h_pre")
                        : xh;
      } else {
        pre = xh;
        if (h) {
          std::string rh = cell.Add("Slice", {rd}, Attrs({{"axis", IntAttrValue(0)}, {"begin", IntAttrValue(2 * hidden)},
                                                          {"size", IntAttrValue(hidden)}}), at + "r_h");
          std::string gated = cell.Add("Mul", {rg, *h}, {}, at + "r_times_h");
          pre = cell.Add("Add", {pre, cell.Add("MatMul", {gated, rh}, Attrs({{"transpose_b", BoolAttrValue(true)}}),
                                               at + "gated_proj")}, {}, at + "h_pre_x");
        }
        if (rec_bias) pre = cell.Add("Add", {pre, cell.Gate(*rec_bias, 2, at + "rb_h")}, {}, at + "h_pre");
      }
      std::string cand = cell.Add("Tanh", {pre}, {}, at + "h_candidate");
      // h = cand + z * (h_prev - cand); from a zero state, cand - z * cand.
      h = h ? cell.Add("Add", {cand, cell.Add("Mul", {z, cell.Add("Sub", {*h, cand}, {}, at + "h_minus_candidate")}, {},
                                              at + "z_times_diff")}, {}, at + "h")
            : cell.Add("Sub", {cand, cell.Add("Mul", {z, cand}, {}, at + "z_times_candidate")}, {}, at + "h");
      per_step[t] = cell.Add("Reshape", {*h}, Attrs({{"shape", IntsAttrValue({1, -1, hidden})}}), at + "y");
    }
    ys.push_back(steps == 1 ? per_step[0] : cell.Add("Concat", per_step, Attrs({{"axis", IntAttrValue(0)}}), "y"));
    last_h.push_back(*h);
  }
  SetOutputs(c, rec, ys, last_h, {});
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("LSTM",
                        "activation_alpha activation_beta activations clip direction hidden_size input_forget layout",
                        ConvertLstm);
NEREID_REGISTER_ONNX_OP("GRU",
                        "activation_alpha activation_beta activations clip direction hidden_size layout "
                        "linear_before_reset",
                        ConvertGru);

}  // namespace nereid
