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

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "compress/codec.h"
#include "compress/qsgd_buckets.h"
#include "compress/qsgd_elias_buckets.h"

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
    bucket_ = *bucket;
    elias_ = *coding == "elias";
    buckets_ = (elements_ + bucket_ - 1) / bucket_;
    return absl::OkStatus();
  }

  bool variable_length() const override { return elias_; }
  // Elias: the fixed coding's layout, whose fields it codes.
  std::optional<codes::BucketLayout> bucket_layout() const override { return fixed(); }

  // elias: the length word, the norms, then the stream; the bound is every
  // value at the top level.
  int64_t PayloadFloats() const override {
    if (elias_) return elias().BoundFloats();
    return fixed().Floats();
  }

  int64_t UsedFloats(absl::Span<const float> code) const override {
    if (!elias_) return static_cast<int64_t>(code.size());
    return codes::FloatBits(code[0]);
  }

  void Encode(const CodecStep& step, int rank, absl::Span<const float> x, std::vector<absl::Span<float>>,
              absl::Span<float> code) override {
    if (!elias_) {
      codes::EncodeBuckets(codes::QsgdBuckets{fixed()}, x.data(), nullptr, step.UniformSeed(rank), code.data());
      return;
    }
    // Bucket after bucket: the norm (and the draws it calls for), the
    // fields, then their words at the stream's end.
    const codes::QsgdElias coder = elias();
    const uint64_t seed = step.UniformSeed(rank);
    float* norms = code.data() + 1;
    float* stream = code.data() + coder.StreamAt();
    std::fill(code.begin() + coder.StreamAt(), code.end(), 0.0f);
    std::vector<uint8_t> fields(std::min(bucket_, elements_));
    uint64_t draw = 0, at = 0;
    for (int64_t b = 0; b < buckets_; ++b) {
      const int64_t begin = b * bucket_, n = std::min(bucket_, elements_ - begin);
      const uint64_t draws = coder.fixed.Prepare(&x[begin], nullptr, n, &norms[b]);
      coder.Fields(&x[begin], n, norms[b], seed, draw, fields.data());
      at = coder.Write(fields.data(), n, at, [&](uint64_t k, uint32_t word) {
        stream[k] = codes::BitsFloat(codes::FloatBits(stream[k]) | word);
      });
      draw += draws;
    }
    const uint32_t used = static_cast<uint32_t>(coder.StreamAt() + (at + 31) / 32);
    code[0] = codes::BitsFloat(used);
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

  codes::QsgdElias elias() const { return {codes::QsgdBuckets{fixed()}}; }

  void DecodeAddElias(absl::Span<const float> code, absl::Span<float> out) const {
    const codes::QsgdElias coder = elias();
    // A short (bad) length word cuts the code: what is past it reads as 0.
    const int64_t size = static_cast<int64_t>(code.size());
    const int64_t words = std::max<int64_t>(0, size - coder.StreamAt());
    const float* stream = code.data() + std::min(size, coder.StreamAt());
    uint64_t at = 0;
    for (int64_t b = 0; b < buckets_; ++b) {
      const int64_t begin = b * bucket_, n = std::min(bucket_, elements_ - begin);
      const float norm = 1 + b < size ? code[1 + b] : 0.0f;
      at = coder.DecodeAdd(stream, words, at, n, norm, &out[begin]);
    }
  }

  bool elias_ = true;
  int64_t buckets_ = 0;
  int64_t elements_ = 0;
  int bits_ = 4;
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
