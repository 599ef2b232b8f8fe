// QSGD (Alistarh et al., 2017): stochastic quantization to s levels per
// bucket. Each bucket of `bucket` values is sent as its L2 norm and, per
// value, a sign bit and a level l in [0, s], s = 2^(bits-1) - 1:
//
//   q(x_i) = norm * sign(x_i) * l_i / s,  l_i = floor(r) + Bernoulli(r - floor(r)),  r = |x_i| / norm * s
//
// so E[q(x)] = x (unbiased) and |q(x_i) - x_i| <= norm / s. Codes carry
// per-bucket scales, so they are all-gathered, not summed.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/compress/codec.h"

namespace nereid {
namespace {

class QsgdCodec : public GatherCodec {
 public:
  absl::Status Init(const std::vector<int64_t>& dims, const CodecOptions& o) override {
    elements_ = ElementCount(dims);
    absl::StatusOr<int64_t> bits = o.Integer("bits", 4, 2, 8);
    if (!bits.ok()) return bits.status();
    absl::StatusOr<int64_t> bucket = o.Integer("bucket", 512, 1, int64_t{1} << 24);
    if (!bucket.ok()) return bucket.status();
    bits_ = static_cast<int>(*bits);
    levels_ = (1 << (bits_ - 1)) - 1;
    bucket_ = *bucket;
    return absl::OkStatus();
  }

  int64_t PayloadFloats() const override {
    int64_t full = elements_ / bucket_, rest = elements_ % bucket_;
    return full * (1 + PackedWords(bucket_, bits_)) + (rest > 0 ? 1 + PackedWords(rest, bits_) : 0);
  }

  void Encode(const CodecStep& step, int rank, absl::Span<const float> x, std::vector<absl::Span<float>>,
              absl::Span<float> code) override {
    UniformSource uniform = step.Uniform(rank);
    std::vector<uint32_t> levels;
    float* out = code.data();
    for (int64_t begin = 0; begin < elements_; begin += bucket_) {
      const int64_t n = std::min(bucket_, elements_ - begin);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[begin + i]) * x[begin + i];
      const float norm = static_cast<float>(std::sqrt(sum));
      levels.assign(n, 0);
      const float to_levels = norm > 0 ? static_cast<float>(levels_) / norm : 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[begin + i];
        uint32_t level = 0;
        if (norm > 0) {
          const float r = std::min(std::fabs(v) * to_levels, static_cast<float>(levels_));
          const float floor = std::floor(r);
          level = static_cast<uint32_t>(floor) + (uniform.Next() < r - floor ? 1 : 0);
          level = std::min<uint32_t>(level, levels_);
        }
        levels[i] = level | (std::signbit(v) ? 1u << (bits_ - 1) : 0u);
      }
      *out++ = norm;
      const int64_t words = PackedWords(n, bits_);
      PackBits(levels, bits_, absl::MakeSpan(out, words));
      out += words;
    }
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    const float* in = code.data();
    const uint32_t sign = 1u << (bits_ - 1);
    for (int64_t begin = 0; begin < elements_; begin += bucket_) {
      const int64_t n = std::min(bucket_, elements_ - begin);
      const float scale = *in++ / static_cast<float>(levels_);
      const int64_t words = PackedWords(n, bits_);
      absl::Span<const float> packed(in, words);
      float* o = &out[begin];
      ForEachPacked(packed, bits_, n, [&](int64_t i, uint32_t c) {
        const float magnitude = scale * static_cast<float>(c & (sign - 1));
        o[i] += (c & sign) ? -magnitude : magnitude;
      });
      in += words;
    }
  }

 private:
  int64_t elements_ = 0;
  int bits_ = 4;
  int levels_ = 7;
  int64_t bucket_ = 512;
};

NEREID_REGISTER_CODEC({"qsgd",
                       "QSGD: unbiased stochastic quantization to 2^(bits-1)-1 levels per bucket (sign bit + "
                       "level, one float32 norm per bucket); all-gathered",
                       {{"bits", "(4) bits per value, 2..8"}, {"bucket", "(512) values per norm"}},
                       [] { return std::make_unique<QsgdCodec>(); }});

}  // namespace
}  // namespace nereid
