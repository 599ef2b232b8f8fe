// ONNX LSTM and GRU: one LstmLayer or GruLayer node per direction, each the
// whole sequence and its gradient through time in one kernel
// (ops/cpu/lstm_kernels.cc, gru_kernels.cc). Gate orders are ONNX's (LSTM:
// i, o, f, c; GRU: z, r, h); forward, reverse and bidirectional (two layers
// and a Concat); a zero initial state (what PyTorch exports as zeros
// expanded to the batch) is no input at all. Not supported: peepholes,
// sequence_lens, clip, input_forget, activations other than the defaults,
// batch-first layout 1.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

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
  const int64_t g = 3 * rec.hidden;
  std::vector<std::string> ys, last_h;
  for (int d = 0; d < rec.directions; ++d) {
    Cell cell{&c, absl::StrCat("d", d), rec.hidden};
    std::vector<std::string> inputs = {rec.x, cell.Matrix(rec.w, d, g, rec.in, "w"),
                                       cell.Matrix(rec.r, d, g, rec.hidden, "r")};
    inputs.push_back(rec.bias ? cell.Add("Reshape", {cell.Matrix(*rec.bias, d, 1, 2 * g, "b")},
                                         Attrs({{"shape", IntsAttrValue({2 * g})}}), "bias")
                              : c.AddFloatConstant(std::vector<float>(2 * g, 0.0f), {2 * g}, absl::StrCat("d", d, "/bias")));
    if (rec.h0) inputs.push_back(cell.Matrix(*rec.h0, d, -1, rec.hidden, "h0"));
    std::string layer = cell.Add("GruLayer", inputs,
                                 Attrs({{"hidden_size", IntAttrValue(rec.hidden)},
                                        {"reverse", BoolAttrValue(rec.Backward(d))},
                                        {"linear_before_reset", BoolAttrValue(c.IntAttr("linear_before_reset", 0) != 0)}}),
                                 "gru");
    ys.push_back(layer);
    last_h.push_back(layer + ":1");
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
