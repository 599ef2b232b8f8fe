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

#include "compress/codec.h"
#include "compress/terngrad_buckets.h"

namespace nereid {
namespace {

class TernGradCodec : public BucketedGatherCodec {
 public:
  TernGradCodec() : BucketedGatherCodec(codes::TernGradBuckets::kHead, codes::TernGradBuckets::kBits) {}

  void Encode(const CodecStep& step, int rank, absl::Span<const float> x, std::vector<absl::Span<float>>,
              absl::Span<float> code) override {
    codes::EncodeBuckets(codes::TernGradBuckets{layout()}, x.data(), nullptr, step.UniformSeed(rank), code.data());
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    codes::DecodeAddBuckets(codes::TernGradBuckets{layout()}, code.data(), out.data());
  }
};
NEREID_REGISTER_CODEC({"terngrad",
                       "TernGrad: unbiased stochastic ternarization to {-s, 0, s}, s = max|x| per bucket (2 bits "
                       "per value, one float32 scale per bucket); all-gathered",
                       {{"bucket", "(512) values per scale"}},
                       [] { return std::make_unique<TernGradCodec>(); }});

}  // namespace
}  // namespace nereid
