// ONNX Conv, MaxPool, AveragePool and GlobalAveragePool -> Conv2D (+ BiasAdd),
// MaxPool, AvgPool, GlobalAvgPool (+ Reshape). ONNX's auto_pad and ceil_mode
// become explicit padding, computed from the static height and width shape
// inference found. One spatial dimension ([N, C, L]: nn.Conv1d, MaxPool1d)
// runs as two with height 1: the input, the filter and the output are
// reshaped around the 2-D op (no copies), and every window attribute gets a
// leading 1.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

struct Window {
  std::vector<int64_t> kernel;     // kh, kw
  std::vector<int64_t> strides;    // sh, sw
  std::vector<int64_t> dilations;  // dh, dw
  std::vector<int64_t> pads;       // ONNX order: h_begin, w_begin, h_end, w_end
};

bool IsOneDimensional(const OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  return dims && dims->size() == 3;
}

// Two spatial dims of a rank-4 input (height 1 for a rank-3 one), or
// Unimplemented.
absl::StatusOr<std::vector<int64_t>> SpatialDims(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  if (!dims) return c.Unsupported("the input's rank is unknown");
  if (dims->size() == 3) return std::vector<int64_t>{1, (*dims)[2]};
  if (dims->size() != 4) {
    return c.Unsupported(absl::StrCat("a rank-", dims->size(), " input (1-D and 2-D spatial inputs are supported)"));
  }
  return std::vector<int64_t>{(*dims)[2], (*dims)[3]};
}

// A 1-D window attribute seen as 2-D: a leading `one` (pads: begin and end
// each get a 0).
std::vector<int64_t> Lift(const std::vector<int64_t>& v, int64_t one, bool pads) {
  if (v.empty()) return v;
  if (pads) return v.size() == 2 ? std::vector<int64_t>{0, v[0], 0, v[1]} : v;
  return v.size() == 1 ? std::vector<int64_t>{one, v[0]} : v;
}

// [N, C, L] -> [N, C, 1, L] (value `name` of static C and L; N may vary).
absl::StatusOr<std::string> ReshapeTo2D(OnnxNodeContext& c, const std::string& x, std::optional<std::vector<int64_t>> dims,
                                        const std::string& suffix) {
  if (!dims || dims->size() != 3 || (*dims)[1] < 0 || (*dims)[2] < 0) {
    return c.Unsupported("a 1-D input needs static channels and length");
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["shape"] = IntsAttrValue({(*dims)[0] < 0 ? -1 : (*dims)[0], (*dims)[1], 1, (*dims)[2]});
  return c.AddNode("Reshape", {x}, attrs, suffix);
}

// The 2-D result back to the rank-3 output ONNX's shape inference found.
absl::StatusOr<std::string> ReshapeTo1D(OnnxNodeContext& c, const std::string& y) {
  std::optional<std::vector<int64_t>> out = c.OutputDims(0);
  if (!out || out->size() != 3 || (*out)[1] < 0 || (*out)[2] < 0) return c.Unsupported("the 1-D output's shape is unknown");
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["shape"] = IntsAttrValue({(*out)[0] < 0 ? -1 : (*out)[0], (*out)[1], (*out)[2]});
  return c.AddNode("Reshape", {y}, attrs);
}

absl::StatusOr<Window> ReadWindow(OnnxNodeContext& c, std::vector<int64_t> kernel, bool ceil_mode) {
  ASSIGN_OR_RETURN(std::vector<int64_t> in, SpatialDims(c));
  Window w;
  const bool one_d = IsOneDimensional(c);
  w.kernel = one_d ? Lift(kernel, 1, false) : std::move(kernel);
  w.strides = one_d ? Lift(c.IntsAttr("strides"), 1, false) : c.IntsAttr("strides");
  w.dilations = one_d ? Lift(c.IntsAttr("dilations"), 1, false) : c.IntsAttr("dilations");
  w.pads = one_d ? Lift(c.IntsAttr("pads"), 0, true) : c.IntsAttr("pads");
  if (w.strides.empty()) w.strides = {1, 1};
  if (w.dilations.empty()) w.dilations = {1, 1};
  if (w.pads.empty()) w.pads = {0, 0, 0, 0};
  if (w.kernel.size() != 2 || w.strides.size() != 2 || w.dilations.size() != 2 || w.pads.size() != 4) {
    return c.Malformed("kernel_shape, strides, dilations and pads must describe two spatial dimensions");
  }
  for (int d = 0; d < 2; ++d) {
    if (w.kernel[d] < 1 || w.strides[d] < 1 || w.dilations[d] < 1) {
      return c.Malformed("kernel_shape, strides and dilations must be positive");
    }
  }
  for (int64_t p : w.pads) {
    if (p < 0) return c.Malformed("pads must not be negative");
  }
  const std::string auto_pad = c.StringAttr("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    w.pads = {0, 0, 0, 0};
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int d = 0; d < 2; ++d) {
      if (in[d] < 0) return c.Unsupported("auto_pad SAME needs a static height and width");
      const int64_t out = (in[d] + w.strides[d] - 1) / w.strides[d];
      const int64_t span = (w.kernel[d] - 1) * w.dilations[d] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[d] + span - in[d]);
      const int64_t small = total / 2, large = total - total / 2;
      w.pads[d] = auto_pad == "SAME_UPPER" ? small : large;
      w.pads[d + 2] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad != "NOTSET") {
    return c.Malformed(absl::StrCat("unknown auto_pad '", auto_pad, "'"));
  }
  if (ceil_mode) {
    // The output size rounds up: pad the end so the floor formula reaches it,
    // keeping ONNX's rule that the last window starts inside the input or
    // its begin padding.
    for (int d = 0; d < 2; ++d) {
      if (in[d] < 0) return c.Unsupported("ceil_mode needs a static height and width");
      const int64_t span = (w.kernel[d] - 1) * w.dilations[d] + 1;
      const int64_t padded = in[d] + w.pads[d] + w.pads[d + 2];
      int64_t out = (padded - span + w.strides[d] - 1) / w.strides[d] + 1;
      if ((out - 1) * w.strides[d] >= in[d] + w.pads[d]) --out;
      w.pads[d + 2] += std::max<int64_t>(0, (out - 1) * w.strides[d] + span - padded);
    }
  }
  return w;
}

void SetWindowAttrs(const Window& w, google::protobuf::Map<std::string, AttrValue>& attrs) {
  if (w.strides != std::vector<int64_t>{1, 1}) attrs["strides"] = IntsAttrValue(w.strides);
  if (std::any_of(w.pads.begin(), w.pads.end(), [](int64_t p) { return p != 0; })) {
    attrs["padding"] = StringAttrValue("EXPLICIT");
    attrs["pads"] = IntsAttrValue({w.pads[0], w.pads[2], w.pads[1], w.pads[3]});  // top, bottom, left, right
  }
}

absl::Status ConvertConv(OnnxNodeContext& c) {
  const bool one_d = IsOneDimensional(c);
  std::optional<std::vector<int64_t>> w_dims = c.InputDims(1);
  std::vector<int64_t> kernel = c.IntsAttr("kernel_shape");
  if (kernel.empty()) {
    if (!w_dims || w_dims->size() != (one_d ? 3u : 4u)) return c.Unsupported("the filter's shape is unknown");
    kernel.assign(w_dims->begin() + 2, w_dims->end());
  }
  ASSIGN_OR_RETURN(Window w, ReadWindow(c, kernel, /*ceil_mode=*/false));
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  ASSIGN_OR_RETURN(std::string filter, c.Input(1));
  if (one_d) {
    ASSIGN_OR_RETURN(x, ReshapeTo2D(c, x, c.InputDims(0), "input_2d"));
    ASSIGN_OR_RETURN(filter, ReshapeTo2D(c, filter, w_dims, "filter_2d"));
  }
  google::protobuf::Map<std::string, AttrValue> attrs;
  SetWindowAttrs(w, attrs);
  if (w.dilations != std::vector<int64_t>{1, 1}) attrs["dilations"] = IntsAttrValue(w.dilations);
  if (c.IntAttr("group", 1) != 1) attrs["groups"] = IntAttrValue(c.IntAttr("group", 1));
  std::string y = c.AddNode("Conv2D", {x, filter}, attrs, c.HasInput(2) || one_d ? "conv" : "");
  if (c.HasInput(2)) {
    ASSIGN_OR_RETURN(std::string bias, c.Input(2));
    y = c.AddNode("BiasAdd", {y, bias}, {}, one_d ? "bias" : "");
  }
  if (one_d) {
    ASSIGN_OR_RETURN(y, ReshapeTo1D(c, y));
  }
  c.SetOutput(0, y);
  return absl::OkStatus();
}

OnnxConverterFn Pool(const std::string& op) {
  return [op](OnnxNodeContext& c) -> absl::Status {
    std::vector<int64_t> kernel = c.IntsAttr("kernel_shape");
    if (kernel.empty()) return c.Malformed("kernel_shape is required");
    ASSIGN_OR_RETURN(Window w, ReadWindow(c, kernel, c.IntAttr("ceil_mode", 0) != 0));
    if (w.dilations != std::vector<int64_t>{1, 1}) return c.Unsupported("dilated pooling is not supported");
    if (c.IntAttr("storage_order", 0) != 0) return c.Unsupported("storage_order 1 is not supported");
    if (c.OutputUsed(1)) return c.Unsupported("the Indices output is not supported");
    const bool one_d = IsOneDimensional(c);
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    if (one_d) {
      ASSIGN_OR_RETURN(x, ReshapeTo2D(c, x, c.InputDims(0), "input_2d"));
    }
    google::protobuf::Map<std::string, AttrValue> attrs;
    attrs["ksize"] = IntsAttrValue(w.kernel);
    SetWindowAttrs(w, attrs);
    if (c.IntAttr("count_include_pad", 0) != 0) attrs["count_padding"].set_b(true);
    std::string y = c.AddNode(op, {x}, attrs, one_d ? "pool" : "");
    if (one_d) {
      ASSIGN_OR_RETURN(y, ReshapeTo1D(c, y));
    }
    c.SetOutput(0, y);
    return absl::OkStatus();
  };
}

// ONNX keeps the pooled dims as 1s ([N,C,1,1]); Nereid's GlobalAvgPool
// drops them, so a Reshape puts them back (a following Flatten undoes it).
absl::Status ConvertGlobalAveragePool(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  if (dims && dims->size() == 3) {  // [N, C, L] -> [N, C, 1]: the mean over L
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    google::protobuf::Map<std::string, AttrValue> attrs;
    attrs["axes"] = IntsAttrValue({2});
    c.SetOutput(0, c.AddNode("ReduceMean", {x}, attrs));
    return absl::OkStatus();
  }
  if (!dims || dims->size() != 4) return c.Unsupported("only rank-4 (NCHW) inputs are supported");
  if ((*dims)[1] < 0) return c.Unsupported("the channel count is not static");
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  std::string pooled = c.AddNode("GlobalAvgPool", {x}, {}, "pool");
  google::protobuf::Map<std::string, AttrValue> attrs;
  attrs["shape"] = IntsAttrValue({-1, (*dims)[1], 1, 1});
  c.SetOutput(0, c.AddNode("Reshape", {pooled}, attrs));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("Conv", "auto_pad dilations group kernel_shape pads strides", ConvertConv);
NEREID_REGISTER_ONNX_OP("MaxPool", "auto_pad ceil_mode dilations kernel_shape pads storage_order strides",
                        Pool("MaxPool"));
NEREID_REGISTER_ONNX_OP("AveragePool", "auto_pad ceil_mode count_include_pad kernel_shape pads strides",
                        Pool("AvgPool"));
NEREID_REGISTER_ONNX_OP("GlobalAveragePool", "", ConvertGlobalAveragePool);

}  // namespace nereid
