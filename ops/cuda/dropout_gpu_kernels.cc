// GPU kernels for Dropout and DropoutGrad: the mask is the CPU kernel's
// (ops/cpu/dropout_kernels.cc), a counter-based hash of (seed, step,
// element), so a device draws the host's masks bit for bit.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"
#include "ops/dropout_mask.h"

namespace nereid {
namespace {

class DropoutGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    rate_ = attrs.at("rate")->f();
    seed_ = static_cast<uint64_t>(attrs.at("seed")->i());
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (!ctx->step().training || rate_ == 0) {
      return cuda::CopyOnStream(y->raw(), x.raw(), x.num_bytes(), stream, absl::StrCat("'", ctx->node().name(), "'"));
    }
    if (y->num_elements() == 0) return absl::OkStatus();
    const uint64_t stream_seed = DropoutStream(seed_, ctx->step().step);
    const uint64_t threshold = DropoutThreshold(rate_);
    return cuda::Launched(cuda::math::Dropout(x.data<float>(), y->data<float>(), y->num_elements(), stream_seed,
                                              threshold, 1.0f / (1.0f - rate_), stream),
                          *ctx);
  }

 private:
  float rate_ = 0.5f;
  uint64_t seed_ = 0;
};

NEREID_REGISTER_KERNEL("Dropout", kGpu, DT_FLOAT, DropoutGpuKernel);
// The same function of dy: the mask and scale are the forward pass's.
NEREID_REGISTER_KERNEL("DropoutGrad", kGpu, DT_FLOAT, DropoutGpuKernel);

}  // namespace
}  // namespace nereid
