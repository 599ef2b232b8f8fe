// TernGrad (Wen et al., 2017, "TernGrad: Ternary Gradients to Reduce
// Communication in Distributed Deep Learning"): stochastic ternarization per
// bucket. Each bucket of `bucket` values is sent as its scale s = max|x_i| and,
// per value, a ternary t_i in {-1, 0, +1} (2 bits):
//
//   q(x_i) = s * sign(x_i) * b_i,  b_i ~ Bernoulli(|x_i| / s)
//
// so E[q(x)] = x (unbiased). No state; the paper's optional gradient clipping
// is left to the optimizer. Codes carry per-bucket scales, so they are
// all-gathered, not summed.

#include <algorithm>
#include <cmath>

#include "compress/codec.h"

namespace nereid {
namespace {

constexpr int kBits = 2;
constexpr uint32_t kPositive = 1, kNegative = 2;  // 0: zero

class TernGradCodec : public BucketedGatherCodec {
 public:
  TernGradCodec() : BucketedGatherCodec(/*head=*/1, /*bits=*/kBits) {}

  void Encode(const CodecStep& step, int rank, absl::Span<const float> x, std::vector<absl::Span<float>>,
              absl::Span<float> code) override {
    UniformSource uniform = step.Uniform(rank);
    std::vector<uint32_t> ternary;
    float* out = code.data();
    for (int64_t begin = 0; begin < elements(); begin += bucket()) {
      const int64_t n = std::min(bucket(), elements() - begin);
      // A NaN scale is kept, not skipped: the decode then spreads it over the
      // bucket, as a dense allreduce would, instead of hiding it.
      float scale = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float m = std::fabs(x[begin + i]);
        if (std::isnan(m) || m > scale) scale = m;
      }
      ternary.assign(n, 0);
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[begin + i];
        const float m = std::fabs(v);
        // m >= scale: the maximum is always kept, even if uniform() returns 1.
        if (m > 0 && (m >= scale || uniform.Next() < m / scale)) {
          ternary[i] = std::signbit(v) ? kNegative : kPositive;
        }
      }
      *out++ = scale;
      const int64_t words = PackedWords(n, kBits);
      PackBits(ternary, kBits, absl::MakeSpan(out, words));
      out += words;
    }
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    const float* in = code.data();
    for (int64_t begin = 0; begin < elements(); begin += bucket()) {
      const int64_t n = std::min(bucket(), elements() - begin);
      const float scale = *in++;
      const int64_t words = PackedWords(n, kBits);
      absl::Span<const float> packed(in, words);
      float* o = &out[begin];
      ForEachPacked(packed, kBits, n, [&](int64_t i, uint32_t t) {
        // scale * 0 for a zero, not a skip, so a non-finite scale shows.
        const float sign = t == kPositive ? 1.0f : t == kNegative ? -1.0f : 0.0f;
        o[i] += scale * sign;
      });
      in += words;
    }
  }
};

NEREID_REGISTER_CODEC({"terngrad",
                       "TernGrad: unbiased stochastic ternarization to {-s, 0, s}, s = max|x| per bucket (2 bits "
                       "per value, one float32 scale per bucket); all-gathered",
                       {{"bucket", "(512) values per scale"}},
                       [] { return std::make_unique<TernGradCodec>(); }});

}  // namespace
}  // namespace nereid
