// Dropout. The mask is a pure function of (seed, step, element index) through
// a counter-based hash, so the backward pass regenerates exactly the mask the
// forward pass drew without storing it, and a resumed run draws the same
// masks as an uninterrupted one.

#include <cstdint>

#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"
#include "ops/dropout_mask.h"

namespace nereid {
namespace {

class DropoutKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    rate_ = attrs.at("rate")->f();
    seed_ = static_cast<uint64_t>(attrs.at("seed")->i());
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (!ctx->step().training || rate_ == 0) return ctx->SetOutput(0, x);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const float* in = x.data<float>();
    float* out = y->data<float>();
    uint64_t stream = DropoutStream(seed_, ctx->step().step);
    // Keep when the top 24 bits, as a fraction of 2^24, are >= rate.
    uint64_t threshold = DropoutThreshold(rate_);
    float scale = 1.0f / (1.0f - rate_);
    cpu::ParallelFor(ctx, y->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        bool keep = (DropoutMix(stream + static_cast<uint64_t>(i)) >> 40) >= threshold;
        out[i] = keep ? in[i] * scale : 0.0f;
      }
    });
    return absl::OkStatus();
  }

 private:
  float rate_ = 0.5f;
  uint64_t seed_ = 0;
};

NEREID_REGISTER_KERNEL("Dropout", kCpu, DT_FLOAT, DropoutKernel);
// The same function of dy: the mask and scale are the forward pass's.
NEREID_REGISTER_KERNEL("DropoutGrad", kCpu, DT_FLOAT, DropoutKernel);

}  // namespace
}  // namespace nereid
