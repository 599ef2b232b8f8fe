// BatchNorm and BatchNormGrad through oneDNN, with PyTorch's semantics
// (BatchNorm1d/2d): x is [N, C, ...] and each channel is normalised over N and
// every dimension after C, seen by oneDNN as plain NCHW [N, C, S, 1]. While
// training, y uses the batch mean and biased batch variance, which also become
// saved_mean/saved_var, and the running statistics move towards the batch
// ones by `momentum` (the variance unbiased by M/(M-1), M = N*S). Otherwise y
// uses the running statistics, which pass through unchanged. Primitives are
// cached per input shape (and, forward, per phase).

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

using dnnl::memory;
using flags = dnnl::normalization_flags;

// [N, C, d2, d3, ...] -> [N, C, d2*d3*..., 1].
memory::desc DataDesc(const std::vector<int64_t>& dims) {
  int64_t spatial = 1;
  for (size_t i = 2; i < dims.size(); ++i) spatial *= dims[i];
  return memory::desc({dims[0], dims[1], spatial, 1}, memory::data_type::f32, memory::format_tag::nchw);
}

// Elements per channel: N times the product of the dims after C.
int64_t PerChannel(const std::vector<int64_t>& dims) {
  int64_t m = dims[0];
  for (size_t i = 2; i < dims.size(); ++i) m *= dims[i];
  return m;
}

constexpr int64_t kBatchNormGrain = 1 << 16;

// (x, scale, offset, running_mean, running_var)
//   -> (y, saved_mean, saved_var, next_running_mean, next_running_var).
// A built primitive with the descriptors its arguments are wrapped in.
struct Primitive {
  memory::desc data, channels;
  dnnl::primitive primitive;
};

class BatchNormKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    epsilon_ = attrs.at("epsilon")->f();
    momentum_ = attrs.at("momentum")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& running_mean = ctx->input(3);
    const Tensor& running_var = ctx->input(4);
    bool training = ctx->step().training;
    int64_t m = PerChannel(x.dims());
    if (training && m <= 1) {
      return absl::InvalidArgumentError(absl::StrCat("expected more than 1 value per channel when training, got x ",
                                                     x.DebugString()));
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (!training) {
      RETURN_IF_ERROR(ctx->SetOutput(1, running_mean));
      RETURN_IF_ERROR(ctx->SetOutput(2, running_var));
      RETURN_IF_ERROR(ctx->SetOutput(3, running_mean));
      RETURN_IF_ERROR(ctx->SetOutput(4, running_var));
      if (y->num_elements() == 0) return absl::OkStatus();
      int threads = ctx->AcquireThreads(x.num_elements(), kBatchNormGrain);
      ASSIGN_OR_RETURN(const Primitive* p, Get(x.dims(), training, threads));
      return cpu::RunPrimitive(p->primitive,
                               {{DNNL_ARG_SRC, cpu::Wrap(p->data, x)},
                                {DNNL_ARG_DST, cpu::Wrap(p->data, *y)},
                                {DNNL_ARG_SCALE, cpu::Wrap(p->channels, ctx->input(1))},
                                {DNNL_ARG_SHIFT, cpu::Wrap(p->channels, ctx->input(2))},
                                {DNNL_ARG_MEAN, cpu::Wrap(p->channels, running_mean)},
                                {DNNL_ARG_VARIANCE, cpu::Wrap(p->channels, running_var)}},
                               threads, "batch normalization");
    }

    ASSIGN_OR_RETURN(Tensor * mean, ctx->AllocateOutput(1));
    ASSIGN_OR_RETURN(Tensor * var, ctx->AllocateOutput(2));
    ASSIGN_OR_RETURN(Tensor * next_mean, ctx->AllocateOutput(3));
    ASSIGN_OR_RETURN(Tensor * next_var, ctx->AllocateOutput(4));
    int threads = ctx->AcquireThreads(x.num_elements(), kBatchNormGrain);
    ASSIGN_OR_RETURN(const Primitive* p, Get(x.dims(), training, threads));
    RETURN_IF_ERROR(cpu::RunPrimitive(p->primitive,
                                      {{DNNL_ARG_SRC, cpu::Wrap(p->data, x)},
                                       {DNNL_ARG_DST, cpu::Wrap(p->data, *y)},
                                       {DNNL_ARG_SCALE, cpu::Wrap(p->channels, ctx->input(1))},
                                       {DNNL_ARG_SHIFT, cpu::Wrap(p->channels, ctx->input(2))},
                                       {DNNL_ARG_MEAN, cpu::Wrap(p->channels, *mean)},
                                       {DNNL_ARG_VARIANCE, cpu::Wrap(p->channels, *var)}},
                                      threads, "batch normalization"));
    // The running update, as torch.nn.BatchNorm2d does it.
    const float* rm = running_mean.data<float>();
    const float* rv = running_var.data<float>();
    const float* bm = mean->data<float>();
    const float* bv = var->data<float>();
    float* nm = next_mean->data<float>();
    float* nv = next_var->data<float>();
    float unbias = static_cast<float>(static_cast<double>(m) / static_cast<double>(m - 1));
    for (int64_t c = 0; c < mean->num_elements(); ++c) {
      nm[c] = (1 - momentum_) * rm[c] + momentum_ * bm[c];
      nv[c] = (1 - momentum_) * rv[c] + momentum_ * (bv[c] * unbias);
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<const Primitive*> Get(const std::vector<int64_t>& xd, bool training, int threads) {
    return cache_.Get(std::make_pair(xd, training), threads, [&] {
      Primitive p;
      p.data = DataDesc(xd);
      p.channels = cpu::PlainDesc({xd[1]});
      flags f = flags::use_scale | flags::use_shift;
      if (!training) f |= flags::use_global_stats;
      dnnl::batch_normalization_forward::primitive_desc pd(
          dnnl::batch_normalization_forward::desc(
              training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, p.data, epsilon_, f),
          cpu::CpuEngine());
      p.primitive = dnnl::batch_normalization_forward(pd);
      return p;
    }, "batch normalization");
  }

  float epsilon_ = 1e-5f;
  float momentum_ = 0.1f;
  cpu::PrimitiveCache<std::pair<std::vector<int64_t>, bool>, Primitive> cache_;
};

// (dy, x, scale, saved_mean, saved_var) -> (dx, dscale, doffset), the
// gradients of training-mode BatchNorm (the batch statistics depend on x).
class BatchNormGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    epsilon_ = attrs.at("epsilon")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    if (x.rank() < 2 || dy.dims() != x.dims()) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNormGrad needs dy and x of one shape of rank >= 2, got ",
                                                     dy.DebugString(), " and ", x.DebugString()));
    }
    for (int i = 2; i < 5; ++i) {
      if (ctx->input(i).num_elements() != x.dim(1)) {
        return absl::InvalidArgumentError(absl::StrCat("BatchNormGrad input ", i, " is ", ctx->input(i).DebugString(),
                                                       " but x ", x.DebugString(), " has ", x.dim(1), " channels"));
      }
    }
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * dscale, ctx->AllocateOutput(1));
    ASSIGN_OR_RETURN(Tensor * doffset, ctx->AllocateOutput(2));
    if (dx->num_elements() == 0) {
      std::fill_n(dscale->data<float>(), dscale->num_elements(), 0.0f);
      std::fill_n(doffset->data<float>(), doffset->num_elements(), 0.0f);
      return absl::OkStatus();
    }
    int threads = ctx->AcquireThreads(x.num_elements(), kBatchNormGrain);
    ASSIGN_OR_RETURN(const Primitive* p, Get(x.dims(), threads));
    // oneDNN 2.6 counts DNNL_ARG_SHIFT among the inputs of the backward pass
    // under use_shift and refuses to run without it, though no gradient
    // depends on the offset; scale stands in for it (read-only, never used).
    return cpu::RunPrimitive(p->primitive,
                             {{DNNL_ARG_SRC, cpu::Wrap(p->data, x)},
                              {DNNL_ARG_DIFF_DST, cpu::Wrap(p->data, dy)},
                              {DNNL_ARG_SCALE, cpu::Wrap(p->channels, ctx->input(2))},
                              {DNNL_ARG_SHIFT, cpu::Wrap(p->channels, ctx->input(2))},
                              {DNNL_ARG_MEAN, cpu::Wrap(p->channels, ctx->input(3))},
                              {DNNL_ARG_VARIANCE, cpu::Wrap(p->channels, ctx->input(4))},
                              {DNNL_ARG_DIFF_SRC, cpu::Wrap(p->data, *dx)},
                              {DNNL_ARG_DIFF_SCALE, cpu::Wrap(p->channels, *dscale)},
                              {DNNL_ARG_DIFF_SHIFT, cpu::Wrap(p->channels, *doffset)}},
                             threads, "batch normalization backward");
  }

 private:
  absl::StatusOr<const Primitive*> Get(const std::vector<int64_t>& xd, int threads) {
    return cache_.Get(xd, threads, [&] {
      Primitive p;
      p.data = DataDesc(xd);
      p.channels = cpu::PlainDesc({xd[1]});
      flags f = flags::use_scale | flags::use_shift;
      const dnnl::engine& eng = cpu::CpuEngine();
      dnnl::batch_normalization_forward::primitive_desc fwd(
          dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, p.data, epsilon_, f), eng);
      dnnl::batch_normalization_backward::primitive_desc bwd(
          dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, p.data, p.data, epsilon_, f), eng, fwd);
      p.primitive = dnnl::batch_normalization_backward(bwd);
      return p;
    }, "batch normalization backward");
  }

  float epsilon_ = 1e-5f;
  cpu::PrimitiveCache<std::vector<int64_t>, Primitive> cache_;
};

NEREID_REGISTER_KERNEL("BatchNorm", kCpu, DT_FLOAT, BatchNormKernel);
NEREID_REGISTER_KERNEL("BatchNormGrad", kCpu, DT_FLOAT, BatchNormGradKernel);

}  // namespace
}  // namespace nereid
