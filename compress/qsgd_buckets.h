#ifndef NEREID_COMPRESS_QSGD_BUCKETS_H_
#define NEREID_COMPRESS_QSGD_BUCKETS_H_

// QSGD's fixed coding one bucket at a time (bucket_codes.h), for the host
// codec (qsgd_codec.cc) and its GPU kernels: the head is the bucket's L2
// norm, then `bits` bits per value, the level l in [0, s] (s = 2^(bits-1)-1)
// and a sign bit above it. Every value of a bucket whose norm is positive
// takes one draw.

#include "compress/bucket_codes.h"

namespace nereid::codes {

struct QsgdBuckets {
  BucketLayout layout;  // head 1

  NEREID_HD int levels() const { return (1 << (layout.bits - 1)) - 1; }
  NEREID_HD uint32_t sign() const { return 1u << (layout.bits - 1); }

  NEREID_HD static float Norm(const float* x, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return static_cast<float>(sqrt(sum));
  }

  NEREID_HD uint64_t Prepare(const float* x, const float*, int64_t n, float* code) const {
    code[0] = Norm(x, n);
    return code[0] > 0 ? static_cast<uint64_t>(n) : 0;
  }

  NEREID_HD float ToLevels(float norm) const { return norm > 0 ? static_cast<float>(levels()) / norm : 0.0f; }

  // The field of v: l = floor(r) + Bernoulli(r - floor(r)), r = |v| / norm * s,
  // and the sign bit; `draw()` is called once when the norm is positive.
  template <typename Draw>
  NEREID_HD uint32_t Field(float v, float norm, float to_levels, Draw draw) const {
    uint32_t level = 0;
    if (norm > 0) {
      const float r = MinOf(fabsf(v) * to_levels, static_cast<float>(levels()));
      const float floor = floorf(r);
      // A NaN r (an infinite value: inf * 0) is level 0, not a cast's
      // undefined value (the draw is still taken, as the count says).
      level = r != r ? 0u : static_cast<uint32_t>(floor);
      level += draw() < r - floor ? 1 : 0;
      if (level > static_cast<uint32_t>(levels())) level = levels();
    }
    return level | (SignBit(v) ? sign() : 0u);
  }

  NEREID_HD void Encode(const float* x, float*, int64_t n, uint64_t seed, uint64_t draw, float* code) const {
    const float norm = code[0], to_levels = ToLevels(norm);
    PackFields(layout, n, code,
               [&](int64_t i) { return Field(x[i], norm, to_levels, [&] { return UniformAt(seed, draw++); }); });
  }

  NEREID_HD float Value(const float* code, uint32_t c) const {
    const float magnitude = (code[0] / static_cast<float>(levels())) * static_cast<float>(c & (sign() - 1));
    return (c & sign()) ? -magnitude : magnitude;
  }
};

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_QSGD_BUCKETS_H_
