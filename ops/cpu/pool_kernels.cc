// Max and average pooling through oneDNN; global average pooling as loops.
// MaxPoolGrad reruns the forward pass with a workspace (which element won
// each window) rather than keeping one alive from the forward pass: pooling is
// cheap next to the convolutions around it, and the forward op stays a plain
// function of x.

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/window.h"

namespace nereid {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class PoolPass { kForward, kBackward };

class PoolKernel : public OpKernel {
 public:
  PoolKernel(dnnl::algorithm algorithm, PoolPass pass) : algorithm_(algorithm), pass_(pass) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    window_ = cpu::ReadWindowAttrs(attrs);
    const auto& k = attrs.at("ksize")->list().i();
    ksize_ = {k[0], k[1]};
    return absl::OkStatus();
  }

  // Forward: (x) -> y. Backward: (x, dy) -> dx.
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    std::vector<int64_t> y_dims = pass_ == PoolPass::kForward ? ctx->output_dims(0) : ctx->input(1).dims();
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Primitives* p, Get(x.dims(), y_dims));
    int64_t y_elements = y_dims[0] * y_dims[1] * y_dims[2] * y_dims[3];
    int threads = ctx->AcquireThreads(y_elements * ksize_[0] * ksize_[1], 1 << 16);
    if (pass_ == PoolPass::kForward) {
      return cpu::RunPrimitive(p->forward, {{DNNL_ARG_SRC, cpu::Wrap(p->x, x)}, {DNNL_ARG_DST, cpu::Wrap(p->y, *out)}},
                               threads, "pooling");
    }
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, cpu::Wrap(p->y, ctx->input(1))},
                                            {DNNL_ARG_DIFF_SRC, cpu::Wrap(p->x, *out)}};
    Tensor y, workspace;
    if (algorithm_ == dnnl::algorithm::pooling_max) {
      ASSIGN_OR_RETURN(y, Tensor::Allocate(DT_FLOAT, y_dims));
      ASSIGN_OR_RETURN(workspace, Tensor::Allocate(DT_UINT8, {static_cast<int64_t>(p->workspace.get_size())}));
      RETURN_IF_ERROR(cpu::RunPrimitive(p->forward,
                                        {{DNNL_ARG_SRC, cpu::Wrap(p->x, x)},
                                         {DNNL_ARG_DST, cpu::Wrap(p->y, y)},
                                         {DNNL_ARG_WORKSPACE, cpu::Wrap(p->workspace, workspace)}},
                                        threads, "pooling"));
      args[DNNL_ARG_WORKSPACE] = cpu::Wrap(p->workspace, workspace);
    }
    return cpu::RunPrimitive(p->backward, args, threads, "pooling backward");
  }

 private:
  struct Primitives {
    memory::desc x, y, workspace;
    dnnl::primitive forward, backward;
  };

  absl::StatusOr<const Primitives*> Get(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd) {
    return cache_.Get(xd, [&] { return Build(xd, yd); }, "pooling");
  }

  Primitives Build(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd) const {
    {
      Primitives p;
      p.x = memory::desc({xd.begin(), xd.end()}, memory::data_type::f32, tag::nchw);
      p.y = memory::desc({yd.begin(), yd.end()}, memory::data_type::f32, tag::nchw);
      cpu::ResolvedWindow w = cpu::Resolve(window_, xd[2], xd[3], yd[2], yd[3], ksize_[0], ksize_[1]);
      memory::dims kernel = {ksize_[0], ksize_[1]};
      const dnnl::engine& eng = cpu::CpuEngine();
      bool backward = pass_ == PoolPass::kBackward;
      dnnl::pooling_forward::primitive_desc fwd(
          dnnl::pooling_forward::desc(backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
                                      algorithm_, p.x, p.y, w.strides, kernel, w.pad_l, w.pad_r),
          eng);
      p.forward = dnnl::pooling_forward(fwd);
      if (backward) {
        p.workspace = fwd.workspace_desc();
        dnnl::pooling_backward::primitive_desc bwd(
            dnnl::pooling_backward::desc(algorithm_, p.x, p.y, w.strides, kernel, w.pad_l, w.pad_r), eng, fwd);
        p.backward = dnnl::pooling_backward(bwd);
      }
      return p;
    }
  }

  dnnl::algorithm algorithm_;
  PoolPass pass_;
  cpu::WindowAttrs window_;
  std::vector<int64_t> ksize_;
  cpu::PrimitiveCache<std::vector<int64_t>, Primitives> cache_;
};

class MaxPoolKernel : public PoolKernel {
 public:
  MaxPoolKernel() : PoolKernel(dnnl::algorithm::pooling_max, PoolPass::kForward) {}
};
class MaxPoolGradKernel : public PoolKernel {
 public:
  MaxPoolGradKernel() : PoolKernel(dnnl::algorithm::pooling_max, PoolPass::kBackward) {}
};
class AvgPoolKernel : public PoolKernel {
 public:
  AvgPoolKernel() : PoolKernel(dnnl::algorithm::pooling_avg_exclude_padding, PoolPass::kForward) {}
};
class AvgPoolGradKernel : public PoolKernel {
 public:
  AvgPoolGradKernel() : PoolKernel(dnnl::algorithm::pooling_avg_exclude_padding, PoolPass::kBackward) {}
};

// [N,C,H,W] -> [N,C], mean over H*W.
class GlobalAvgPoolKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    int64_t planes = x.dim(0) * x.dim(1), area = x.dim(2) * x.dim(3);
    const float* in = x.data<float>();
    float* out = y->data<float>();
    float scale = area > 0 ? 1.0f / static_cast<float>(area) : 0.0f;
    cpu::ParallelFor(ctx, planes, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, area)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p) {
                         float sum = 0;
                         for (int64_t i = 0; i < area; ++i) sum += in[p * area + i];
                         out[p] = sum * scale;
                       }
                     });
    return absl::OkStatus();
  }
};

// (x, dy [N,C]) -> dx: dy / (H*W) spread over each plane.
class GlobalAvgPoolGradKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const float* dy = ctx->input(1).data<float>();
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    int64_t planes = x.dim(0) * x.dim(1), area = x.dim(2) * x.dim(3);
    float* out = dx->data<float>();
    float scale = area > 0 ? 1.0f / static_cast<float>(area) : 0.0f;
    cpu::ParallelFor(ctx, planes, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, area)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p) {
                         float v = dy[p] * scale;
                         for (int64_t i = 0; i < area; ++i) out[p * area + i] = v;
                       }
                     });
    return absl::OkStatus();
  }
};

NEREID_REGISTER_KERNEL("MaxPool", kCpu, DT_FLOAT, MaxPoolKernel);
NEREID_REGISTER_KERNEL("MaxPoolGrad", kCpu, DT_FLOAT, MaxPoolGradKernel);
NEREID_REGISTER_KERNEL("AvgPool", kCpu, DT_FLOAT, AvgPoolKernel);
NEREID_REGISTER_KERNEL("AvgPoolGrad", kCpu, DT_FLOAT, AvgPoolGradKernel);
NEREID_REGISTER_KERNEL("GlobalAvgPool", kCpu, DT_FLOAT, GlobalAvgPoolKernel);
NEREID_REGISTER_KERNEL("GlobalAvgPoolGrad", kCpu, DT_FLOAT, GlobalAvgPoolGradKernel);

}  // namespace
}  // namespace nereid
