#ifndef NEREID_COMPRESS_ONEBIT_BUCKETS_H_
#define NEREID_COMPRESS_ONEBIT_BUCKETS_H_

// 1-bit SGD's code one bucket at a time (bucket_codes.h), for the host codec
// (onebit_codec.cc) and its GPU kernels. x = g + residual; the head is the
// mean of the bucket's non-negative x and the mean of its negative x (0
// where there are none), then one bit per value, set for a negative x; the
// residual becomes x - decode(code). No draws.

#include "compress/bucket_codes.h"

namespace nereid::codes {

struct OneBitBuckets {
  static constexpr int kHead = 2, kBits = 1;
  BucketLayout layout;

  NEREID_HD uint64_t Prepare(const float* g, const float* residual, int64_t n, float* code) const {
    double sum[2] = {0, 0};  // [non-negative, negative]; double: a bucket may be long
    int64_t count[2] = {0, 0};
    for (int64_t i = 0; i < n; ++i) {
      const float x = g[i] + residual[i];
      const int negative = x < 0 ? 1 : 0;  // -0 and NaN count as non-negative
      sum[negative] += static_cast<double>(x);
      ++count[negative];
    }
    for (int s = 0; s < 2; ++s) code[s] = count[s] > 0 ? static_cast<float>(sum[s] / static_cast<double>(count[s])) : 0.0f;
    return 0;
  }

  // The residual is read before it is written, value by value, so it may be
  // updated in place.
  NEREID_HD void Encode(const float* g, float* residual, int64_t n, uint64_t, uint64_t, float* code) const {
    PackFields(layout, n, code, [&](int64_t i) -> uint32_t {
      const float x = g[i] + residual[i];
      const uint32_t negative = x < 0 ? 1u : 0u;
      residual[i] = x - (0.0f + code[negative]);  // x - decode(code), the decode added to 0
      return negative;
    });
  }

  NEREID_HD float Value(const float* code, uint32_t negative) const { return code[negative]; }
};

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_ONEBIT_BUCKETS_H_
