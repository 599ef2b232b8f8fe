// ONNX Conv, MaxPool, AveragePool and GlobalAveragePool -> Conv2D (+ BiasAdd),
// MaxPool, AvgPool, GlobalAvgPool (+ Reshape). Two spatial dimensions only.
// ONNX's auto_pad and ceil_mode become explicit padding, computed from the
// static height and width shape inference found.

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

// Two spatial dims of a rank-4 input, or Unimplemented.
absl::StatusOr<std::vector<int64_t>> SpatialDims(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
  if (!dims) return c.Unsupported("the input's rank is unknown");
  if (dims->size() != 4) {
    return c.Unsupported(absl::StrCat("a rank-", dims->size(), " input (only 2-D images, NCHW, are supported)"));
  }
  return std::vector<int64_t>{(*dims)[2], (*dims)[3]};
}

absl::StatusOr<Window> ReadWindow(OnnxNodeContext& c, std::vector<int64_t> kernel, bool ceil_mode) {
  ASSIGN_OR_RETURN(std::vector<int64_t> in, SpatialDims(c));
  Window w;
  w.kernel = std::move(kernel);
  w.strides = c.IntsAttr("strides");
  w.dilations = c.IntsAttr("dilations");
  w.pads = c.IntsAttr("pads");
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
  std::vector<int64_t> kernel = c.IntsAttr("kernel_shape");
  if (kernel.empty()) {
    std::optional<std::vector<int64_t>> w_dims = c.InputDims(1);
    if (!w_dims || w_dims->size() != 4) return c.Unsupported("the filter's shape is unknown or not 2-D");
    kernel = {(*w_dims)[2], (*w_dims)[3]};
  }
  ASSIGN_OR_RETURN(Window w, ReadWindow(c, kernel, /*ceil_mode=*/false));
  ASSIGN_OR_RETURN(std::string x, c.Input(0));
  ASSIGN_OR_RETURN(std::string filter, c.Input(1));
  google::protobuf::Map<std::string, AttrValue> attrs;
  SetWindowAttrs(w, attrs);
  if (w.dilations != std::vector<int64_t>{1, 1}) attrs["dilations"] = IntsAttrValue(w.dilations);
  if (c.IntAttr("group", 1) != 1) attrs["groups"] = IntAttrValue(c.IntAttr("group", 1));
  std::string y = c.AddNode("Conv2D", {x, filter}, attrs, c.HasInput(2) ? "conv" : "");
  if (c.HasInput(2)) {
    ASSIGN_OR_RETURN(std::string bias, c.Input(2));
    y = c.AddNode("BiasAdd", {y, bias});
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
    ASSIGN_OR_RETURN(std::string x, c.Input(0));
    google::protobuf::Map<std::string, AttrValue> attrs;
    attrs["ksize"] = IntsAttrValue(w.kernel);
    SetWindowAttrs(w, attrs);
    if (c.IntAttr("count_include_pad", 0) != 0) attrs["count_padding"].set_b(true);
    c.SetOutput(0, c.AddNode(op, {x}, attrs));
    return absl::OkStatus();
  };
}

// ONNX keeps the pooled dims as 1s ([N,C,1,1]); Nereid's GlobalAvgPool
// drops them, so a Reshape puts them back (a following Flatten undoes it).
absl::Status ConvertGlobalAveragePool(OnnxNodeContext& c) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(0);
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
