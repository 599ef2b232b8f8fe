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

#include "compress/codec.h"
#include "compress/onebit_buckets.h"

namespace nereid {
namespace {

class OneBitCodec : public BucketedGatherCodec {
 public:
  OneBitCodec() : BucketedGatherCodec(codes::OneBitBuckets::kHead, codes::OneBitBuckets::kBits) {}

  std::vector<CodecStateSpec> State() const override { return {{"residual", {elements()}, true}}; }

  void Encode(const CodecStep&, int, absl::Span<const float> g, std::vector<absl::Span<float>> state,
              absl::Span<float> code) override {
    codes::EncodeBuckets(codes::OneBitBuckets{layout()}, g.data(), state[0].data(), 0, code.data());
  }

  void DecodeAdd(absl::Span<const float> code, absl::Span<float> out) const override {
    codes::DecodeAddBuckets(codes::OneBitBuckets{layout()}, code.data(), out.data());
  }
};
NEREID_REGISTER_CODEC({"onebit",
                       "1-bit SGD with error feedback: one sign bit per value, decoded to the mean of the "
                       "bucket's non-negative or negative values (two float32 per bucket); all-gathered",
                       {{"bucket", "(512) values per pair of reconstruction means"}},
                       [] { return std::make_unique<OneBitCodec>(); }});

}  // namespace
}  // namespace nereid
