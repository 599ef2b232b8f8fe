#ifndef NEREID_COMPRESS_TOPK_SELECT_H_
#define NEREID_COMPRESS_TOPK_SELECT_H_

// Top-k's selection order as one 64-bit key per value, for the host codec
// (topk_codec.cc) and its GPU kernels (ops/cuda/codec_gpu.cu): ascending keys
// put larger |v| first, ties to the lower index, NaN as the largest (sent,
// and shown in the average, instead of kept in the residual). A magnitude's
// bits order as the magnitude does (it is never negative), so the key is its
// complemented bits above the index.

#include <cstdint>

#include "compress/bucket_codes.h"

namespace nereid::codes {

NEREID_HD inline uint64_t TopKKey(float v, uint32_t index) {
  const float m = fabsf(v);
  const uint32_t bits = m != m ? 0x7F800000u : FloatBits(m);  // NaN ranks as +infinity
  return (static_cast<uint64_t>(~bits) << 32) | index;
}

// The momentum-corrected accumulation before the selection (DGC):
// u = m * u + g and v = v + u, or v = v + g without momentum.
NEREID_HD inline void TopKAccumulate(float momentum, float g, float* u, float* v) {
  if (u == nullptr) {
    *v = *v + g;
    return;
  }
  *u = momentum * *u + g;
  *v = *v + *u;
}

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_TOPK_SELECT_H_
