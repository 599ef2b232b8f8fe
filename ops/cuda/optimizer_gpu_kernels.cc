// GPU kernels for the learning-rate schedule and the SGD and Adam updates.
// The rate is computed on the host (the same schedule as the CPU kernel's)
// and written by a one-element kernel, so no host buffer outlives the
// launch; the updates read it from device memory.

#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"
#include "ops/learning_rate.h"

namespace nereid {
namespace {

// An update reads lr[0] and its inputs `like_param` element by element with
// the parameter (input 0). Shape inference checks this; a device read past a
// buffer would go unnoticed, so the kernel checks again.
absl::Status CheckUpdateInputs(const OpKernelContext& ctx, std::initializer_list<int> like_param) {
  if (ctx.input(2).num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(cuda::Prefix(ctx.node()), "the learning rate is ", ctx.input(2).DebugString(), ", not a scalar"));
  }
  for (int i : like_param) {
    if (ctx.input(i).num_elements() != ctx.input(0).num_elements()) {
      return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx.node()), "input ", i, " is ",
                                                     ctx.input(i).DebugString(), " but the parameter is ",
                                                     ctx.input(0).DebugString()));
    }
  }
  return absl::OkStatus();
}

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
    RETURN_IF_ERROR(has_velocity ? CheckUpdateInputs(*ctx, {1, 3}) : CheckUpdateInputs(*ctx, {1}));
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

// (param, grad, lr, m, v) -> (next_param, next_m, next_v); the bias
// corrections are the CPU kernel's, by the global step, computed here on
// the host in double.
class ApplyAdamGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    hyper_.beta1 = attrs.at("beta1")->f();
    hyper_.beta2 = attrs.at("beta2")->f();
    hyper_.epsilon = attrs.at("epsilon")->f();
    hyper_.weight_decay = attrs.at("weight_decay")->f();
    hyper_.decoupled = attrs.at("decoupled")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    RETURN_IF_ERROR(CheckUpdateInputs(*ctx, {1, 3, 4}));
    ASSIGN_OR_RETURN(Tensor * next_p, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * next_m, ctx->AllocateOutput(1));
    ASSIGN_OR_RETURN(Tensor * next_v, ctx->AllocateOutput(2));
    const int64_t n = next_p->num_elements();
    if (n == 0) return absl::OkStatus();
    cuda::math::AdamHyper hyper = hyper_;
    const double t = static_cast<double>(ctx->step().step + 1);
    hyper.correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hyper.beta1), t));
    hyper.correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hyper.beta2), t));
    return cuda::Launched(
        cuda::math::Adam(ctx->input(0).data<float>(), ctx->input(1).data<float>(), ctx->input(2).data<float>(),
                         ctx->input(3).data<float>(), ctx->input(4).data<float>(), next_p->data<float>(),
                         next_m->data<float>(), next_v->data<float>(), n, hyper, stream),
        *ctx);
  }

 private:
  cuda::math::AdamHyper hyper_{0.9f, 0.999f, 1e-8f, 0.0f, false, 1.0f, 1.0f};
};

NEREID_REGISTER_KERNEL("LearningRate", kGpu, DT_FLOAT, LearningRateGpuKernel);
NEREID_REGISTER_KERNEL("ApplySgd", kGpu, DT_FLOAT, ApplySgdGpuKernel);
NEREID_REGISTER_KERNEL("ApplyAdam", kGpu, DT_FLOAT, ApplyAdamGpuKernel);

}  // namespace
}  // namespace nereid
