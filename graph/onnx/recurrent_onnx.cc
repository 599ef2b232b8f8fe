// ONNX LSTM and GRU -> the cell's ops unrolled over the (static) sequence:
// one BatchMatMul computes every step's input projection, then each step is
// a MatMul of the previous hidden state, gate Slices, Sigmoid / Tanh and the
// elementwise updates. The backward pass through time is autodiff's, over
// the same ops, so nothing here has a gradient of its own. Gate orders are
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

// What one direction's unrolled cell needs.
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

struct RecurrentSpec {
  int gates;  // 4 (LSTM) or 3 (GRU)
  bool has_cell_state;
};

absl::Status ConvertRecurrent(OnnxNodeContext& c, const RecurrentSpec& spec) {
  if (c.IntAttr("layout", 0) != 0) return c.Unsupported("layout 1 (batch first)");
  if (c.HasAttr("clip")) return c.Unsupported("clip");
  if (c.IntAttr("input_forget", 0) != 0) return c.Unsupported("input_forget");
  if (c.HasAttr("activations") || c.HasAttr("activation_alpha") || c.HasAttr("activation_beta")) {
    return c.Unsupported("activations other than the defaults");
  }
  if (c.HasInput(4)) return c.Unsupported("sequence_lens (every sequence must have the full length)");
  if (spec.has_cell_state && c.HasInput(7)) return c.Unsupported("peepholes");
  const std::string direction = c.StringAttr("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return c.Malformed(absl::StrCat("unknown direction '", direction, "'"));
  }
  const int directions = direction == "bidirectional" ? 2 : 1;
  const int64_t hidden = c.IntAttr("hidden_size", -1);
  std::optional<std::vector<int64_t>> x_dims = c.InputDims(0);
  if (!x_dims || x_dims->size() != 3) return c.Unsupported("the input's shape is unknown or not [T, B, I]");
  const int64_t steps = (*x_dims)[0], in = (*x_dims)[2];
  if (steps < 1 || in < 1) return c.Unsupported("the sequence length and input size must be static");
  if (steps > kMaxUnrolledSteps) {
    return c.Unsupported(absl::StrCat(steps, " steps (sequences are unrolled, up to ", kMaxUnrolledSteps, ")"));
  }
  if (hidden < 1) return c.Malformed("hidden_size is required");
  const int64_t g = spec.gates * hidden;
  const bool linear_before_reset = c.IntAttr("linear_before_reset", 0) != 0;
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  ASSIGN_OR_RETURN(std::string w, c.Input(1));
  ASSIGN_OR_RETURN(std::string r, c.Input(2));
  std::optional<std::string> bias;
  if (c.HasInput(3)) {
    ASSIGN_OR_RETURN(bias, c.Input(3));
  }
  // Initial states: zeros (absent, or known to be 0) or a value.
  auto initial = [&](int input) -> absl::StatusOr<std::optional<std::string>> {
    if (!c.HasInput(input)) return std::optional<std::string>();
    std::optional<float> uniform = c.UniformInput(input);
    if (uniform && *uniform == 0.0f) return std::optional<std::string>();
    ASSIGN_OR_RETURN(std::string v, c.Input(input));
    return std::optional<std::string>(v);
  };
  ASSIGN_OR_RETURN(std::optional<std::string> h0, initial(5));
  std::optional<std::string> c0;
  if (spec.has_cell_state) {
    ASSIGN_OR_RETURN(c0, initial(6));
  }

  std::vector<std::vector<std::string>> ys(directions);  // per direction, in time order
  std::vector<std::string> last_h, last_c;
  for (int d = 0; d < directions; ++d) {
    Cell cell{&c, absl::StrCat("d", d), hidden};
    const bool backward = direction == "reverse" || d == 1;
    std::string wd = cell.Matrix(w, d, g, in, "w");
    std::string rd = cell.Matrix(r, d, g, hidden, "r");
    // Input projections of every step at once: [T, B, G].
    std::string gx = cell.Add("BatchMatMul", {x, wd}, Attrs({{"transpose_b", BoolAttrValue(true)}}), "x_proj");
    std::optional<std::string> rec_bias;  // added to the recurrent product (GRU), or folded into gx (LSTM)
    if (bias) {
      std::string b = cell.Matrix(*bias, d, 1, 2 * g, "b");
      std::string wb = cell.Add("Reshape", {cell.Add("Slice", {b}, Attrs({{"axis", IntAttrValue(1)}, {"begin", IntAttrValue(0)},
                                                                         {"size", IntAttrValue(g)}}), "wb_slice")},
                                Attrs({{"shape", IntsAttrValue({g})}}), "wb");
      std::string rb = cell.Add("Reshape", {cell.Add("Slice", {b}, Attrs({{"axis", IntAttrValue(1)}, {"begin", IntAttrValue(g)},
                                                                         {"size", IntAttrValue(g)}}), "rb_slice")},
                                Attrs({{"shape", IntsAttrValue({g})}}), "rb");
      if (spec.has_cell_state) {
        gx = cell.Add("Add", {gx, cell.Add("Add", {wb, rb}, {}, "bias")}, {}, "x_proj_bias");
      } else {
        gx = cell.Add("Add", {gx, wb}, {}, "x_proj_bias");
        rec_bias = rb;
      }
    }
    auto state_of = [&](const std::optional<std::string>& init, const std::string& name) -> std::optional<std::string> {
      if (!init) return std::nullopt;
      return cell.Matrix(*init, d, -1, hidden, name);
    };
    std::optional<std::string> h = state_of(h0, "h0");
    std::optional<std::string> cs = spec.has_cell_state ? state_of(c0, "c0") : std::nullopt;
    ys[d].resize(steps);
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = backward ? steps - 1 - i : i;
      const std::string at = absl::StrCat("t", t, "/");
      std::string xt = cell.Add("Reshape", {cell.Add("Slice", {gx}, Attrs({{"axis", IntAttrValue(0)}, {"begin", IntAttrValue(t)},
                                                                         {"size", IntAttrValue(1)}}), at + "x_slice")},
                                Attrs({{"shape", IntsAttrValue({-1, g})}}), at + "x");
      if (spec.has_cell_state) {
        std::string pre = h ? cell.Add("Add", {xt, cell.Add("MatMul", {*h, rd}, Attrs({{"transpose_b", BoolAttrValue(true)}}),
                                                            at + "h_proj")},
                                       {}, at + "gates")
                            : xt;
        std::string ig = cell.Add("Sigmoid", {cell.Gate(pre, 0, at + "i_pre")}, {}, at + "i");
        std::string og = cell.Add("Sigmoid", {cell.Gate(pre, 1, at + "o_pre")}, {}, at + "o");
        std::string cand = cell.Add("Tanh", {cell.Gate(pre, 3, at + "c_pre")}, {}, at + "c_candidate");
        std::string ic = cell.Add("Mul", {ig, cand}, {}, at + "i_times_candidate");
        if (cs) {
          std::string fg = cell.Add("Sigmoid", {cell.Gate(pre, 2, at + "f_pre")}, {}, at + "f");
          cs = cell.Add("Add", {cell.Add("Mul", {fg, *cs}, {}, at + "f_times_c"), ic}, {}, at + "c");
        } else {
          cs = ic;
        }
        h = cell.Add("Mul", {og, cell.Add("Tanh", {*cs}, {}, at + "tanh_c")}, {}, at + "h");
      } else {
        // GRU: rec = h R^T + Rb ([B, 3H]), or Rb alone from a zero state.
        std::optional<std::string> rec;
        if (h) {
          std::string rz = cell.Add("MatMul", {*h, rd}, Attrs({{"transpose_b", BoolAttrValue(true)}}), at + "h_proj");
          rec = rec_bias ? cell.Add("Add", {rz, *rec_bias}, {}, at + "h_proj_bias") : rz;
        } else {
          rec = rec_bias;
        }
        auto plus_rec = [&](int k, const char* name) {
          std::string xk = cell.Gate(xt, k, at + name + "_x");
          return rec ? cell.Add("Add", {xk, cell.Gate(*rec, k, at + name + "_h")}, {}, at + name + "_pre") : xk;
        };
        std::string z = cell.Add("Sigmoid", {plus_rec(0, "z")}, {}, at + "z");
        std::string rg = cell.Add("Sigmoid", {plus_rec(1, "r")}, {}, at + "r");
        std::string xh = cell.Gate(xt, 2, at + "hx");
        std::string pre;
        if (linear_before_reset) {
          pre = rec ? cell.Add("Add", {xh, cell.Add("Mul", {rg, cell.Gate(*rec, 2, at + "hh")}, {}, at + "r_times_hh")}, {},
                               at + "h_pre")
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
      }
      ys[d][t] = *h;
    }
    last_h.push_back(*h);
    if (cs) last_c.push_back(*cs);
  }
  // Y [T, directions, B, H]; Y_h and Y_c [directions, B, H].
  if (c.OutputUsed(0)) {
    std::vector<std::string> per_step;
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<std::string> dirs;
      for (int d = 0; d < directions; ++d) {
        dirs.push_back(c.AddNode("Reshape", {ys[d][t]}, Attrs({{"shape", IntsAttrValue({1, 1, -1, hidden})}}),
                                 absl::StrCat("y/t", t, "/d", d)));
      }
      per_step.push_back(directions == 1 ? dirs[0]
                                         : c.AddNode("Concat", dirs, Attrs({{"axis", IntAttrValue(1)}}),
                                                     absl::StrCat("y/t", t)));
    }
    c.SetOutput(0, steps == 1 ? per_step[0] : c.AddNode("Concat", per_step, Attrs({{"axis", IntAttrValue(0)}}), "y"));
  }
  auto stack = [&](const std::vector<std::string>& states, const char* name) {
    std::vector<std::string> parts;
    for (size_t d = 0; d < states.size(); ++d) {
      parts.push_back(c.AddNode("Reshape", {states[d]}, Attrs({{"shape", IntsAttrValue({1, -1, hidden})}}),
                                absl::StrCat(name, "/d", d)));
    }
    return parts.size() == 1 ? parts[0] : c.AddNode("Concat", parts, Attrs({{"axis", IntAttrValue(0)}}), name);
  };
  if (c.OutputUsed(1)) c.SetOutput(1, stack(last_h, "y_h"));
  if (spec.has_cell_state && c.OutputUsed(2)) c.SetOutput(2, stack(last_c, "y_c"));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("LSTM",
                        "activation_alpha activation_beta activations clip direction hidden_size input_forget layout",
                        [](OnnxNodeContext& c) { return ConvertRecurrent(c, {4, true}); });
NEREID_REGISTER_ONNX_OP("GRU",
                        "activation_alpha activation_beta activations clip direction hidden_size layout "
                        "linear_before_reset",
                        [](OnnxNodeContext& c) { return ConvertRecurrent(c, {3, false}); });

}  // namespace nereid
