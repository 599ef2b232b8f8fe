// 1-bit SGD with error feedback (Seide et al., 2014, "1-Bit Stochastic
// Gradient Descent and its Application to Data-Parallel Distributed Training
// of Speech DNNs"). x = g + residual is quantized per bucket of `bucket`
// values to one sign bit per value plus two float32 reconstruction values,
// the mean of the bucket's non-negative x and the mean of its negative x
// (0 where there are none):
//
//   q(x_i) = x_i >= 0 ? mean{x_j >= 0} : mean{x_j < 0}
//
// and the residual (per rank) becomes x - q(x): the quantization error is fed
// into the next step instead of lost. Codes carry per-bucket means, so they
// are all-gathered, not summed.

#include <algorithm>

#include "compress/codec.h"

namespace nereid {
namespace {

class OneBitCodec : public BucketedGatherCodec {
 public:
  OneBitCodec() : BucketedGatherCodec(/*head=*/2, /*bits=*/1) {}

  std::vector<CodecStateSpec> State() const override { return {{"residual", {elements()}, true}}; }

  void Encode(const CodecStep&, int, absl::Span<const float> g, std::vector<absl::Span<float>> state,
              absl::Span<float> code) override {
    std::vector<float> x;
    AddResidual(g, state[0], x);
    std::vector<uint32_t> negative;
    float* out = code.data();
    for (int64_t begin = 0; begin < elements(); begin += bucket()) {
      const int64_t n = std::min(bucket(), elements() - begin);
      negative.assign(n, 0);
      double sum[2] = {0, 0};  // [non-negative, negative]; double: a bucket may be long
      int64_t count[2] = {0, 0};
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[begin + i];
        negative[i] = v < 0 ? 1 : 0;  // -0 and NaN count as non-negative
        sum[negative[i]] += v;
        ++count[negative[i]];
      }
      for (int s = 0; s < 2; ++s) *out++ = count[s] > 0 ? static_cast<float>(sum[s] / count[s]) : 0.0f;
      const int64_t words = PackedWords(n, 1);
      PackBits(negative, 1, absl::MakeSpan(out, words));
      out += words;
    }
    KeepResidual(*this, x, code, state[0]);
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    const float* in = code.data();
    for (int64_t begin = 0; begin < elements(); begin += bucket()) {
      const int64_t n = std::min(bucket(), elements() - begin);
      const float mean[2] = {in[0], in[1]};
      in += 2;
      const int64_t words = PackedWords(n, 1);
      absl::Span<const float> packed(in, words);
      float* o = &out[begin];
      ForEachPacked(packed, 1, n, [&](int64_t i, uint32_t bit) { o[i] += mean[bit]; });
      in += words;
    }
  }
};

NEREID_REGISTER_CODEC({"onebit",
                       "1-bit SGD with error feedback: one sign bit per value, decoded to the mean of the "
                       "bucket's non-negative or negative values (two float32 per bucket); all-gathered",
                       {{"bucket", "(512) values per pair of reconstruction means"}},
                       [] { return std::make_unique<OneBitCodec>(); }});

}  // namespace
}  // namespace nereid
