// GPU kernels for the learning-rate schedule and the SGD update. The rate
// is computed on the host (the same schedule as the CPU kernel's) and
// written by a one-element kernel, so no host buffer outlives the launch;
// ApplySgd reads it from device memory.

#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"
#include "ops/learning_rate.h"

namespace nereid {
namespace {

class LearningRateGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    schedule_.Init(attrs);
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    return cuda::Launched(cuda::math::Fill(out->data<float>(), schedule_.At(ctx->step()), 1, stream), *ctx);
  }

 private:
  LearningRateSchedule schedule_;
};

// (param, grad, lr, [velocity]) -> (next_param, next_velocity); without a
// velocity the second output is the next parameter, as on the CPU.
class ApplySgdGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    momentum_ = attrs.at("momentum")->f();
    nesterov_ = attrs.at("nesterov")->b();
    weight_decay_ = attrs.at("weight_decay")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const bool has_velocity = ctx->num_inputs() > 3;
    ASSIGN_OR_RETURN(Tensor * next_p, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * next_v, ctx->AllocateOutput(1));
    const int64_t n = next_p->num_elements();
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(cuda::Launched(
        cuda::math::Sgd(ctx->input(0).data<float>(), ctx->input(1).data<float>(), ctx->input(2).data<float>(),
                        has_velocity ? ctx->input(3).data<float>() : nullptr, next_p->data<float>(),
                        has_velocity ? next_v->data<float>() : nullptr, n, momentum_, weight_decay_, nesterov_,
                        stream),
        *ctx));
    if (has_velocity) return absl::OkStatus();
    return cuda::CopyOnStream(next_v->raw(), next_p->raw(), next_p->num_bytes(), stream,
                              absl::StrCat("ApplySgd '", ctx->node().name(), "'"));
  }

 private:
  float momentum_ = 0, weight_decay_ = 0;
  bool nesterov_ = false;
};

NEREID_REGISTER_KERNEL("LearningRate", kGpu, DT_FLOAT, LearningRateGpuKernel);
NEREID_REGISTER_KERNEL("ApplySgd", kGpu, DT_FLOAT, ApplySgdGpuKernel);

}  // namespace
}  // namespace nereid
