// Elementwise nonlinearities and their gradients as vectorisable loops;
// softmax through oneDNN.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

// y[i] = F(x[i]).
template <typename F>
class UnaryKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const float* x = ctx->input(0).data<float>();
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    float* out = y->data<float>();
    cpu::ParallelFor(ctx, y->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = F::Apply(x[i]);
    });
    return absl::OkStatus();
  }
};

// dx[i] = G(dy[i], y[i]).
template <typename G>
class UnaryGradKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const float* dy = ctx->input(0).data<float>();
    const float* y = ctx->input(1).data<float>();
    if (ctx->input(0).dims() != ctx->input(1).dims()) {
      return absl::InvalidArgumentError(absl::StrCat("dy ", ctx->input(0).DebugString(), " and y ",
                                                     ctx->input(1).DebugString(), " differ"));
    }
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    float* out = dx->data<float>();
    cpu::ParallelFor(ctx, dx->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = G::Apply(dy[i], y[i]);
    });
    return absl::OkStatus();
  }
};

struct Relu {
  static float Apply(float x) { return x > 0 ? x : 0; }
};
struct ReluGrad {
  static float Apply(float dy, float y) { return y > 0 ? dy : 0; }
};
struct Sigmoid {
  static float Apply(float x) { return 1.0f / (1.0f + std::exp(-x)); }
};
struct SigmoidGrad {
  static float Apply(float dy, float y) { return dy * y * (1 - y); }
};
struct Tanh {
  static float Apply(float x) { return std::tanh(x); }
};
struct TanhGrad {
  static float Apply(float dy, float y) { return dy * (1 - y * y); }
};

// Softmax forward (input: x) and backward (inputs: dy, y) along `axis`.
class SoftmaxKernel : public OpKernel {
 public:
  explicit SoftmaxKernel(bool backward = false) : backward_(backward) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = static_cast<int>(attrs.at("axis")->i());
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& first = ctx->input(0);
    int axis = axis_ < 0 ? axis_ + first.rank() : axis_;
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    dnnl::memory::desc md = cpu::PlainDesc(first.dims());
    int threads = ctx->AcquireThreads(out->num_elements(), cpu::kElementwiseGrain);
    ASSIGN_OR_RETURN(const dnnl::primitive* primitive, cache_.Get(first.dims(), threads, [&] {
      dnnl::softmax_forward::primitive_desc fwd(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, md, axis), cpu::CpuEngine());
      if (!backward_) return dnnl::primitive(dnnl::softmax_forward(fwd));
      return dnnl::primitive(dnnl::softmax_backward(
          dnnl::softmax_backward::primitive_desc(dnnl::softmax_backward::desc(md, md, axis), cpu::CpuEngine(), fwd)));
    }, "softmax"));
    if (backward_) {
      return cpu::RunPrimitive(*primitive,
                               {{DNNL_ARG_DIFF_DST, cpu::Wrap(md, ctx->input(0))},
                                {DNNL_ARG_DST, cpu::Wrap(md, ctx->input(1))},
                                {DNNL_ARG_DIFF_SRC, cpu::Wrap(md, *out)}},
                               threads, "softmax backward");
    }
    return cpu::RunPrimitive(*primitive, {{DNNL_ARG_SRC, cpu::Wrap(md, first)}, {DNNL_ARG_DST, cpu::Wrap(md, *out)}},
                             threads, "softmax");
  }

 private:
  bool backward_;
  int axis_ = -1;
  cpu::PrimitiveCache<std::vector<int64_t>, dnnl::primitive> cache_;
};

class SoftmaxGradKernel : public SoftmaxKernel {
 public:
  SoftmaxGradKernel() : SoftmaxKernel(/*backward=*/true) {}
};

NEREID_REGISTER_KERNEL("Relu", kCpu, DT_FLOAT, UnaryKernel<Relu>);
NEREID_REGISTER_KERNEL("ReluGrad", kCpu, DT_FLOAT, UnaryGradKernel<ReluGrad>);
NEREID_REGISTER_KERNEL("Sigmoid", kCpu, DT_FLOAT, UnaryKernel<Sigmoid>);
NEREID_REGISTER_KERNEL("SigmoidGrad", kCpu, DT_FLOAT, UnaryGradKernel<SigmoidGrad>);
NEREID_REGISTER_KERNEL("Tanh", kCpu, DT_FLOAT, UnaryKernel<Tanh>);
NEREID_REGISTER_KERNEL("TanhGrad", kCpu, DT_FLOAT, UnaryGradKernel<TanhGrad>);
NEREID_REGISTER_KERNEL("Softmax", kCpu, DT_FLOAT, SoftmaxKernel);
NEREID_REGISTER_KERNEL("SoftmaxGrad", kCpu, DT_FLOAT, SoftmaxGradKernel);

}  // namespace
}  // namespace nereid
