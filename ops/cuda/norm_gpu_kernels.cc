// GPU kernels for BatchNorm and BatchNormGrad with the CPU kernels'
// semantics (ops/cpu/batch_norm_kernels.cc: PyTorch's BatchNorm1d/2d, x
// [N, C, ...] normalised per channel over N and every dim after C).
//
// Training: y by the batch mean and biased variance, which are also
// saved_mean and saved_var; the running statistics move towards them by
// `momentum` (the variance unbiased by M/(M-1), M = N * the dims after C).
// Otherwise y is normalised by the running statistics, which the four
// statistics outputs copy.
//
// The project's kernels (gpu_math.h), not cuDNN's batch-norm API: cuDNN
// saves the inverse standard deviation where saved_var is the variance, and
// does not say in which order it sums. Here the per-channel sums run in
// double over chunks of the channel fixed by its size, added as trees (the
// same result every run, no atomics); the rest is oneDNN's float arithmetic.

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/channel_view.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

// x of rank >= 2 and inputs first..last of one value per channel of x (shape
// inference checked; the device would read past them otherwise).
absl::Status CheckPerChannel(const OpKernelContext& ctx, const Tensor& x, int first, int last) {
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(cuda::Prefix(ctx.node()), "x ", x.DebugString(), " must have rank >= 2 (batch, channels, ...)"));
  }
  for (int i = first; i <= last; ++i) {
    if (ctx.input(i).num_elements() != x.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx.node()), "input ", i, " is ",
                                                     ctx.input(i).DebugString(), " but x ", x.DebugString(), " has ",
                                                     x.dim(1), " channels"));
    }
  }
  return absl::OkStatus();
}

// Scratch for the per-channel sums' partials.
absl::StatusOr<Tensor> Partials(OpKernelContext& ctx, const ChannelView& v) {
  return cuda::Scratch(ctx, cuda::math::BatchNormScratchDoubles(v.channels, v.outer * v.inner) * sizeof(double));
}

// (x, scale, offset, running_mean, running_var)
//   -> (y, saved_mean, saved_var, next_running_mean, next_running_var).
class BatchNormGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    epsilon_ = attrs.at("epsilon")->f();
    momentum_ = attrs.at("momentum")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    RETURN_IF_ERROR(CheckPerChannel(*ctx, x, 1, 4));
    const ChannelView v = ChannelViewOf(x);
    const int64_t m = v.outer * v.inner;
    const bool training = ctx->step().training;
    if (training && m <= 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          cuda::Prefix(ctx->node()), "expected more than 1 value per channel when training, got x ", x.DebugString()));
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    Tensor* stats[4];  // saved_mean, saved_var, next_running_mean, next_running_var
    for (int i = 0; i < 4; ++i) {
      ASSIGN_OR_RETURN(stats[i], ctx->AllocateOutput(1 + i));
    }
    const float* scale = ctx->input(1).data<float>();
    const float* offset = ctx->input(2).data<float>();
    const Tensor& running_mean = ctx->input(3);
    const Tensor& running_var = ctx->input(4);
    if (!training) {
      // On the host these outputs are the running statistics themselves.
      for (int i = 0; i < 4; ++i) {
        const Tensor& from = i % 2 == 0 ? running_mean : running_var;
        RETURN_IF_ERROR(
            cuda::CopyOnStream(stats[i]->raw(), from.raw(), from.num_bytes(), stream, cuda::Prefix(ctx->node())));
      }
      if (y->num_elements() == 0) return absl::OkStatus();
      return cuda::Launched(cuda::math::BatchNormInference(x.data<float>(), scale, offset, running_mean.data<float>(),
                                                           running_var.data<float>(), y->data<float>(), v.outer,
                                                           v.channels, v.inner, epsilon_, stream),
                            *ctx);
    }
    if (y->num_elements() == 0) return absl::OkStatus();  // no channels (m > 1)
    ASSIGN_OR_RETURN(Tensor partials, Partials(*ctx, v));
    const float unbias = static_cast<float>(static_cast<double>(m) / static_cast<double>(m - 1));
    return cuda::Launched(
        cuda::math::BatchNormTraining(
            x.data<float>(), scale, offset, running_mean.data<float>(), running_var.data<float>(), y->data<float>(),
            stats[0]->data<float>(), stats[1]->data<float>(), stats[2]->data<float>(), stats[3]->data<float>(), v.outer,
            v.channels, v.inner, epsilon_, momentum_, unbias, static_cast<double*>(partials.raw()), stream),
        *ctx);
  }

 private:
  float epsilon_ = 1e-5f;
  float momentum_ = 0.1f;
};

// (dy, x, scale, saved_mean, saved_var) -> (dx, dscale, doffset), the
// gradients of training-mode BatchNorm (the batch statistics depend on x).
class BatchNormGradGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    epsilon_ = attrs.at("epsilon")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    if (dy.dims() != x.dims()) {
      return absl::InvalidArgumentError(
          absl::StrCat(cuda::Prefix(ctx->node()), "dy ", dy.DebugString(), " and x ", x.DebugString(), " differ"));
    }
    RETURN_IF_ERROR(CheckPerChannel(*ctx, x, 2, 4));
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * dscale, ctx->AllocateOutput(1));
    ASSIGN_OR_RETURN(Tensor * doffset, ctx->AllocateOutput(2));
    const ChannelView v = ChannelViewOf(x);
    if (v.channels == 0) return absl::OkStatus();
    if (dx->num_elements() == 0) {  // sums over nothing
      RETURN_IF_ERROR(cuda::Launched(cuda::math::Fill(dscale->data<float>(), 0.0f, v.channels, stream), *ctx));
      return cuda::Launched(cuda::math::Fill(doffset->data<float>(), 0.0f, v.channels, stream), *ctx);
    }
    ASSIGN_OR_RETURN(Tensor partials, Partials(*ctx, v));
    return cuda::Launched(
        cuda::math::BatchNormGrad(dy.data<float>(), x.data<float>(), ctx->input(2).data<float>(),
                                  ctx->input(3).data<float>(), ctx->input(4).data<float>(), dx->data<float>(),
                                  dscale->data<float>(), doffset->data<float>(), v.outer, v.channels, v.inner, epsilon_,
                                  static_cast<double*>(partials.raw()), stream),
        *ctx);
  }

 private:
  float epsilon_ = 1e-5f;
};

NEREID_REGISTER_KERNEL("BatchNorm", kGpu, DT_FLOAT, BatchNormGpuKernel);
NEREID_REGISTER_KERNEL("BatchNormGrad", kGpu, DT_FLOAT, BatchNormGradGpuKernel);

}  // namespace
}  // namespace nereid
