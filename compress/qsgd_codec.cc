// QSGD (Alistarh et al., 2017): stochastic quantization to s levels per
// bucket. Each bucket of `bucket` values is sent as its L2 norm and, per
// value, a sign bit and a level l in [0, s], s = 2^(bits-1) - 1:
//
//   q(x_i) = norm * sign(x_i) * l_i / s,  l_i = floor(r) + Bernoulli(r - floor(r)),  r = |x_i| / norm * s
//
// so E[q(x)] = x (unbiased) and |q(x_i) - x_i| <= norm / s. Codes carry
// per-bucket scales, so they are all-gathered, not summed.
//
// Two codings of the levels:
//  - fixed: bits per value (sign + level), packed;
//  - elias (the paper's): a zero level is one bit "0"; any other is "1", the
//    sign, and the Elias gamma code of the level. With a bucket's L2 norm as
//    the scale most levels are 0 or 1 (|x_i| / norm is ~1/sqrt(bucket)), so
//    this averages well under `bits` per value; the code's length varies, and
//    GatherCodec exchanges lengths first.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "compress/bit_stream.h"
#include "compress/codec.h"
#include "compress/qsgd_buckets.h"

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
    absl::StatusOr<std::string> coding = o.Choice("coding", "elias", {"elias", "fixed"});
    if (!coding.ok()) return coding.status();
    bits_ = static_cast<int>(*bits);
    levels_ = (1 << (bits_ - 1)) - 1;
    bucket_ = *bucket;
    elias_ = *coding == "elias";
    buckets_ = (elements_ + bucket_ - 1) / bucket_;
    return absl::OkStatus();
  }

  bool variable_length() const override { return elias_; }
  std::optional<codes::BucketLayout> bucket_layout() const override {
    if (elias_) return std::nullopt;
    return fixed();
  }

  // elias: the length word, the norms, then the stream; the bound is every
  // value at the top level.
  int64_t PayloadFloats() const override {
    if (elias_) {
      const int64_t most_bits = 2 + BitWriter::GammaCount(levels_);
      return 1 + buckets_ + (elements_ * most_bits + 31) / 32;
    }
    return fixed().Floats();
  }

  int64_t UsedFloats(absl::Span<const float> code) const override {
    if (!elias_) return static_cast<int64_t>(code.size());
    uint32_t used;
    std::memcpy(&used, &code[0], sizeof(used));
    return used;
  }

  void Encode(const CodecStep& step, int rank, absl::Span<const float> x, std::vector<absl::Span<float>>,
              absl::Span<float> code) override {
    if (!elias_) {
      codes::EncodeBuckets(codes::QsgdBuckets{fixed()}, x.data(), nullptr, step.UniformSeed(rank), code.data());
      return;
    }
    UniformSource uniform = step.Uniform(rank);
    std::vector<uint32_t> levels;
    float* norms = code.data() + 1;
    BitWriter stream(code.subspan(std::min<size_t>(code.size(), 1 + buckets_)));
    const codes::QsgdBuckets coder{fixed()};
    const uint32_t sign = coder.sign();
    for (int64_t begin = 0, b = 0; begin < elements_; begin += bucket_, ++b) {
      const int64_t n = std::min(bucket_, elements_ - begin);
      // The fixed coding's fields, then the stream's code for each.
      const float norm = norms[b] = codes::QsgdBuckets::Norm(&x[begin], n), to_levels = coder.ToLevels(norm);
      levels.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        levels[i] = coder.Field(x[begin + i], norm, to_levels, [&] { return uniform.Next(); });
      }
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t level = levels[i] & (sign - 1);
        if (level == 0) {
          stream.Put(0, 1);
        } else {  // "1", the sign, gamma(level): one Put
          stream.Put(1 | ((levels[i] & sign) != 0 ? 2u : 0u) | (BitWriter::GammaBits(level) << 2),
                     2 + BitWriter::GammaCount(level));
        }
      }
    }
    const uint32_t used = static_cast<uint32_t>(1 + buckets_ + stream.Finish());
    std::memcpy(&code[0], &used, sizeof(used));
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    if (elias_) {
      DecodeAddElias(code, out);
      return;
    }
    codes::DecodeAddBuckets(codes::QsgdBuckets{fixed()}, code.data(), out.data());
  }

 private:
  codes::BucketLayout fixed() const { return {elements_, bucket_, 1, bits_}; }

  void DecodeAddElias(absl::Span<const float> code, absl::Span<float> out) const {
    const float* norms = code.data() + 1;
    BitReader stream(code.subspan(std::min<size_t>(code.size(), 1 + buckets_)));
    for (int64_t begin = 0, b = 0; begin < elements_; begin += bucket_, ++b) {
      const int64_t n = std::min(bucket_, elements_ - begin);
      const float scale = norms[b] / static_cast<float>(levels_);
      float* o = &out[begin];
      for (int64_t i = 0; i < n; ++i) {
        if (stream.Get(1) == 0) continue;
        const bool negative = stream.Get(1) != 0;
        const float magnitude = scale * static_cast<float>(stream.GetGamma());
        o[i] += negative ? -magnitude : magnitude;
      }
    }
  }

  bool elias_ = true;
  int64_t buckets_ = 0;
  int64_t elements_ = 0;
  int bits_ = 4;
  int levels_ = 7;
  int64_t bucket_ = 512;
};

NEREID_REGISTER_CODEC({"qsgd",
                       "QSGD: unbiased stochastic quantization to 2^(bits-1)-1 levels per bucket (one float32 "
                       "norm per bucket; levels Elias-coded or packed); all-gathered",
                       {{"bits", "(4) sign + level bits, 2..8: 2^(bits-1)-1 levels"},
                        {"bucket", "(512) values per norm"},
                        {"coding", "(elias) elias: variable length, 0 -> 1 bit; fixed: `bits` per value"}},
                       [] { return std::make_unique<QsgdCodec>(); }});

}  // namespace
}  // namespace nereid
