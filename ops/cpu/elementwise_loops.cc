#include "ops/cpu/elementwise_loops.h"

namespace nereid {
namespace cpu {

std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (int i = static_cast<int>(in.size()) - 1, o = static_cast<int>(out.size()) - 1; i >= 0; --i, --o) {
    strides[o] = in[i] == 1 && out[o] != 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

int64_t RepeatPeriod(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  size_t first = 0;
  while (first < in.size() && in[first] == 1) ++first;  // leading 1s repeat the rest
  const size_t kept = in.size() - first;
  if (kept > out.size()) return 0;
  int64_t period = 1;
  for (size_t i = 0; i < kept; ++i) {
    if (in[first + i] != out[out.size() - kept + i]) return 0;
    period *= in[first + i];
  }
  return period;
}

int64_t BroadcastOffset(int64_t index, const std::vector<int64_t>& out, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    offset += (index % out[d]) * strides[d];
    index /= out[d];
  }
  return offset;
}

}  // namespace cpu
}  // namespace nereid
