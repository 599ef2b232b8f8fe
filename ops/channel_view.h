#ifndef NEREID_OPS_CHANNEL_VIEW_H_
#define NEREID_OPS_CHANNEL_VIEW_H_

// A tensor seen as [outer, channels, inner] around its dimension 1 (N, C,
// H*W for images; N, C, 1 for features): how BiasAdd and its gradient index
// channels, on the CPU and on the GPU alike.

#include <cstdint>

#include "core/tensor.h"

namespace nereid {

struct ChannelView {
  int64_t outer, channels, inner;
};

inline ChannelView ChannelViewOf(const Tensor& x) {
  ChannelView v{x.dim(0), x.dim(1), 1};
  for (int i = 2; i < x.rank(); ++i) v.inner *= x.dim(i);
  return v;
}

}  // namespace nereid

#endif  // NEREID_OPS_CHANNEL_VIEW_H_
