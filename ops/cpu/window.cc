#include "ops/cpu/window.h"

#include <algorithm>

namespace nereid {
namespace cpu {

WindowAttrs ReadWindowAttrs(const AttrMap& attrs) {
  WindowAttrs w;
  auto list = [&](const char* name, std::vector<int64_t>* out) {
    auto it = attrs.find(name);
    if (it != attrs.end()) out->assign(it->second->list().i().begin(), it->second->list().i().end());
  };
  list("strides", &w.strides);
  list("dilations", &w.dilations);
  list("pads", &w.pads);
  auto it = attrs.find("padding");
  if (it != attrs.end()) w.padding = it->second->s();
  return w;
}

ResolvedWindow Resolve(const WindowAttrs& w, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, int64_t kh,
                       int64_t kw) {
  ResolvedWindow r;
  r.strides = {w.strides[0], w.strides[1]};
  r.dilations = {w.dilations[0] - 1, w.dilations[1] - 1};
  if (w.padding == "EXPLICIT") {
    r.pad_l = {w.pads[0], w.pads[2]};
    r.pad_r = {w.pads[1], w.pads[3]};
  } else if (w.padding == "SAME") {
    auto total = [](int64_t in, int64_t out, int64_t k, int64_t s, int64_t d) {
      return std::max<int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
    };
    int64_t th = total(in_h, out_h, kh, w.strides[0], w.dilations[0]);
    int64_t tw = total(in_w, out_w, kw, w.strides[1], w.dilations[1]);
    r.pad_l = {th / 2, tw / 2};
    r.pad_r = {th - th / 2, tw - tw / 2};
  } else {
    r.pad_l = {0, 0};
    r.pad_r = {0, 0};
  }
  return r;
}

}  // namespace cpu
}  // namespace nereid
