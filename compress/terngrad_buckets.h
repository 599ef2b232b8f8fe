#ifndef NEREID_COMPRESS_TERNGRAD_BUCKETS_H_
#define NEREID_COMPRESS_TERNGRAD_BUCKETS_H_

// TernGrad's code one bucket at a time (bucket_codes.h), for the host codec
// (terngrad_codec.cc) and its GPU kernels: the head is the bucket's scale
// s = max|x_i|, then 2 bits per value, 0: zero, 1: +s, 2: -s.

#include "compress/bucket_codes.h"

namespace nereid::codes {

struct TernGradBuckets {
  static constexpr int kHead = 1, kBits = 2;
  static constexpr uint32_t kPositive = 1, kNegative = 2;
  BucketLayout layout;

  // The scale; a NaN scale is kept, not skipped: the decode then spreads it
  // over the bucket, as a dense allreduce would, instead of hiding it. A
  // value draws when it is neither zero nor at the scale.
  NEREID_HD uint64_t Prepare(const float* x, const float*, int64_t n, float* code) const {
    float scale = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float m = fabsf(x[i]);
      if (m != m || m > scale) scale = m;
    }
    code[0] = scale;
    uint64_t draws = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float m = fabsf(x[i]);
      if (m > 0 && !(m >= scale)) ++draws;
    }
    return draws;
  }

  // t_i = sign(x_i) * Bernoulli(|x_i| / s); the maximum is always kept, even
  // if the draw were 1.
  NEREID_HD void Encode(const float* x, float*, int64_t n, uint64_t seed, uint64_t draw, float* code) const {
    const float scale = code[0];
    PackFields(layout, n, code, [&](int64_t i) -> uint32_t {
      const float m = fabsf(x[i]);
      if (m > 0 && (m >= scale || UniformAt(seed, draw++) < m / scale)) return SignBit(x[i]) ? kNegative : kPositive;
      return 0u;
    });
  }

  // scale * 0 for a zero, not a skip, so a non-finite scale shows.
  NEREID_HD float Value(const float* code, uint32_t t) const {
    const float sign = t == kPositive ? 1.0f : t == kNegative ? -1.0f : 0.0f;
    return code[0] * sign;
  }
};

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_TERNGRAD_BUCKETS_H_
