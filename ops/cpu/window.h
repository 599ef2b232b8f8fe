#ifndef NEREID_OPS_CPU_WINDOW_H_
#define NEREID_OPS_CPU_WINDOW_H_

// Run-time window geometry for convolution and pooling kernels: strides,
// dilations and the padding actually applied, resolved for concrete input
// and output sizes (SAME padding depends on them).

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "ops/op_registry.h"

namespace nereid {
namespace cpu {

struct WindowAttrs {
  std::vector<int64_t> strides{1, 1};
  std::vector<int64_t> dilations{1, 1};
  std::string padding = "VALID";
  std::vector<int64_t> pads;  // top, bottom, left, right (EXPLICIT)
};

WindowAttrs ReadWindowAttrs(const AttrMap& attrs);

struct ResolvedWindow {
  dnnl::memory::dims strides;
  dnnl::memory::dims dilations;  // oneDNN counts dilation from 0
  dnnl::memory::dims pad_l, pad_r;
};

// For input [.., in_h, in_w], output [.., out_h, out_w] and kernel [kh, kw].
ResolvedWindow Resolve(const WindowAttrs& w, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, int64_t kh,
                       int64_t kw);

}  // namespace cpu
}  // namespace nereid

#endif  // NEREID_OPS_CPU_WINDOW_H_
