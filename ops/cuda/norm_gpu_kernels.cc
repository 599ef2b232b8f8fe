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
//
// LayerNorm and LayerNormGrad (ops/cpu/layer_norm_kernels.cc: x as [rows,
// width], width the product of the dims from `axis` on; outputs y, the
// row means and 1/sqrt(var + epsilon)) are the project's kernels in the
// host's own float arithmetic and summation order (its eight-lane sums per
// row; dscale and dbias adding rows in order), so their floats are the
// host's bit for bit, every run.

#include <cstdint>
#include <initializer_list>
#include <vector>

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

// A gradient's dy (input 0) and x (input 1) have the same dims.
absl::Status CheckDyMatchesX(const OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  if (dy.dims() == x.dims()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(cuda::Prefix(ctx.node()), "dy ", dy.DebugString(), " and x ", x.DebugString(), " differ"));
}

// Outputs 0 .. count - 1, allocated.
absl::StatusOr<std::vector<Tensor*>> AllocateOutputs(OpKernelContext& ctx, int count) {
  std::vector<Tensor*> out(count);
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(out[i], ctx.AllocateOutput(i));
  }
  return out;
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
    ASSIGN_OR_RETURN(std::vector<Tensor*> out, AllocateOutputs(*ctx, 5));
    Tensor* y = out[0];
    Tensor* const* stats = &out[1];  // saved_mean, saved_var, next_running_mean, next_running_var
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
    RETURN_IF_ERROR(CheckDyMatchesX(*ctx));
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    RETURN_IF_ERROR(CheckPerChannel(*ctx, x, 2, 4));
    ASSIGN_OR_RETURN(std::vector<Tensor*> out, AllocateOutputs(*ctx, 3));
    Tensor* dx = out[0];
    Tensor* dscale = out[1];
    Tensor* doffset = out[2];
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

struct RowView {
  int64_t rows = 1, width = 1;
};

// x as [rows, width] around `axis`, as the host views it; an error unless
// each of `per_width` inputs has `width` values and each of `per_row` one
// value per row (the device would read past them otherwise).
absl::StatusOr<RowView> LayerNormView(const OpKernelContext& ctx, const Tensor& x, int64_t axis,
                                      std::initializer_list<int> per_width, std::initializer_list<int> per_row) {
  const int64_t rank = x.rank();
  const int64_t at = axis < 0 ? axis + rank : axis;
  if (at < 0 || at > rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(cuda::Prefix(ctx.node()), "axis ", axis, " is outside x ", x.DebugString()));
  }
  RowView v;
  for (int64_t i = 0; i < rank; ++i) (i < at ? v.rows : v.width) *= x.dim(static_cast<int>(i));
  auto check = [&](std::initializer_list<int> inputs, int64_t count, const char* what) -> absl::Status {
    for (int i : inputs) {
      if (ctx.input(i).num_elements() != count) {
        return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx.node()), "input ", i, " is ",
                                                       ctx.input(i).DebugString(), " but x ", x.DebugString(),
                                                       " needs ", count, " values (", what, ")"));
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(per_width, v.width, "the normalised dims"));
  RETURN_IF_ERROR(check(per_row, v.rows, "one per row"));
  return v;
}

// LayerNorm ((x, scale, bias) -> (y, mean, rstd)) and LayerNormGrad ((dy,
// x, scale, mean, rstd) -> (dx, dscale, dbias)).
class LayerNormGpuKernel : public OpKernel {
 public:
  explicit LayerNormGpuKernel(bool backward = false) : backward_(backward) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    if (!backward_) epsilon_ = attrs.at("epsilon")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    if (backward_) RETURN_IF_ERROR(CheckDyMatchesX(*ctx));
    const Tensor& x = ctx->input(backward_ ? 1 : 0);
    ASSIGN_OR_RETURN(
        RowView v, backward_ ? LayerNormView(*ctx, x, axis_, {2}, {3, 4}) : LayerNormView(*ctx, x, axis_, {1, 2}, {}));
    ASSIGN_OR_RETURN(std::vector<Tensor*> out, AllocateOutputs(*ctx, 3));
    const auto in = [&](int i) { return ctx->input(i).data<float>(); };
    const auto at = [&](int i) { return out[i]->data<float>(); };
    if (!backward_) {
      if (v.rows == 0) return absl::OkStatus();
      return cuda::Launched(
          cuda::math::LayerNorm(in(0), in(1), in(2), at(0), at(1), at(2), v.rows, v.width, epsilon_, stream), *ctx);
    }
    if (v.width == 0) return absl::OkStatus();  // every output is empty
    ASSIGN_OR_RETURN(Tensor row_means, cuda::Scratch(*ctx, 2 * v.rows * sizeof(float)));
    return cuda::Launched(cuda::math::LayerNormGrad(in(0), in(1), in(2), in(3), in(4), at(0), at(1), at(2), v.rows,
                                                    v.width, static_cast<float*>(row_means.raw()), stream),
                          *ctx);
  }

 private:
  bool backward_;
  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

class LayerNormGradGpuKernel : public LayerNormGpuKernel {
 public:
  LayerNormGradGpuKernel() : LayerNormGpuKernel(/*backward=*/true) {}
};

NEREID_REGISTER_KERNEL("BatchNorm", kGpu, DT_FLOAT, BatchNormGpuKernel);
NEREID_REGISTER_KERNEL("BatchNormGrad", kGpu, DT_FLOAT, BatchNormGradGpuKernel);
NEREID_REGISTER_KERNEL("LayerNorm", kGpu, DT_FLOAT, LayerNormGpuKernel);
NEREID_REGISTER_KERNEL("LayerNormGrad", kGpu, DT_FLOAT, LayerNormGradGpuKernel);

}  // namespace
}  // namespace nereid
