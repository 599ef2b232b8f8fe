// Elementwise nonlinearities and their gradients as vectorisable loops;
// GELU, softmax and log-softmax through oneDNN.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/elementwise_loops.h"

namespace nereid {
namespace {

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

// GELU (erf or tanh form) through oneDNN's JIT eltwise primitives, forward
// (x -> y) and backward ((dy, x) -> dx): vectorised erf and tanh, which the
// loops below cannot have without giving up float's exact semantics.
class GeluKernel : public OpKernel {
 public:
  explicit GeluKernel(bool backward = false) : backward_(backward) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    algorithm_ = attrs.at("approximate")->s() == "tanh" ? dnnl::algorithm::eltwise_gelu_tanh
                                                        : dnnl::algorithm::eltwise_gelu_erf;
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(backward_ ? 1 : 0);
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    if (backward_ && ctx->input(0).dims() != x.dims()) {
      return absl::InvalidArgumentError(absl::StrCat("dy ", ctx->input(0).DebugString(), " and x ", x.DebugString(),
                                                     " differ"));
    }
    // One flat run: the op is elementwise, so the shape does not matter.
    dnnl::memory::desc md = cpu::PlainDesc({out->num_elements()});
    int threads = ctx->AcquireThreads(out->num_elements(), cpu::kElementwiseGrain);
    ASSIGN_OR_RETURN(const dnnl::primitive* primitive, cache_.Get(out->num_elements(), threads, [&] {
      dnnl::eltwise_forward::primitive_desc fwd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm_, md, 0.0f, 0.0f), cpu::CpuEngine());
      if (!backward_) return dnnl::primitive(dnnl::eltwise_forward(fwd));
      return dnnl::primitive(dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
          dnnl::eltwise_backward::desc(algorithm_, md, md, 0.0f, 0.0f), cpu::CpuEngine(), fwd)));
    }, "gelu"));
    if (backward_) {
      return cpu::RunPrimitive(*primitive,
                               {{DNNL_ARG_SRC, cpu::Wrap(md, x)},
                                {DNNL_ARG_DIFF_DST, cpu::Wrap(md, ctx->input(0))},
                                {DNNL_ARG_DIFF_SRC, cpu::Wrap(md, *out)}},
                               threads, "gelu backward");
    }
    return cpu::RunPrimitive(*primitive, {{DNNL_ARG_SRC, cpu::Wrap(md, x)}, {DNNL_ARG_DST, cpu::Wrap(md, *out)}}, threads,
                             "gelu");
  }

 private:
  bool backward_;
  dnnl::algorithm algorithm_ = dnnl::algorithm::eltwise_gelu_erf;
  cpu::PrimitiveCache<int64_t, dnnl::primitive> cache_;
};

class GeluGradKernel : public GeluKernel {
 public:
  GeluGradKernel() : GeluKernel(/*backward=*/true) {}
};

// The bounded forms: ReLU6 (Clip 0..6), HardSigmoid, HardSwish (MobileNetV3).
struct Clip {
  explicit Clip(const AttrMap& attrs) : lo(attrs.at("min")->f()), hi(attrs.at("max")->f()) {}
  Clip() = default;
  float lo = 0, hi = 0;
  float Apply(float x) const { return x < lo ? lo : (x > hi ? hi : x); }
};
struct ClipGrad : Clip {
  using Clip::Clip;
  float Apply(float dy, float x) const { return x > lo && x < hi ? dy : 0; }
};
struct HardSigmoid {
  explicit HardSigmoid(const AttrMap& attrs) : alpha(attrs.at("alpha")->f()), beta(attrs.at("beta")->f()) {}
  HardSigmoid() = default;
  float alpha = 0, beta = 0;
  float Apply(float x) const {
    const float v = alpha * x + beta;
    return v < 0 ? 0 : (v > 1 ? 1 : v);
  }
};
struct HardSigmoidGrad : HardSigmoid {
  using HardSigmoid::HardSigmoid;
  float Apply(float dy, float x) const {
    const float v = alpha * x + beta;
    return v > 0 && v < 1 ? dy * alpha : 0;
  }
};
struct HardSwish {
  static float Apply(float x) { return x <= -3 ? 0 : (x >= 3 ? x : x * (x + 3) / 6); }
};
struct HardSwishGrad {
  static float Apply(float dy, float x) { return x < -3 ? 0 : (x > 3 ? dy : dy * (2 * x + 3) / 6); }
};

// Softmax forward (input: x) and backward (inputs: dy, y) along `axis`.
// oneDNN's softmax and logsoftmax primitives share one interface: Fwd and
// Bwd are the primitive classes.
template <typename Fwd, typename Bwd>
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
      typename Fwd::primitive_desc fwd(typename Fwd::desc(dnnl::prop_kind::forward_training, md, axis),
                                       cpu::CpuEngine());
      if (!backward_) return dnnl::primitive(Fwd(fwd));
      return dnnl::primitive(
          Bwd(typename Bwd::primitive_desc(typename Bwd::desc(md, md, axis), cpu::CpuEngine(), fwd)));
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

template <typename Fwd, typename Bwd>
class SoftmaxGradKernel : public SoftmaxKernel<Fwd, Bwd> {
 public:
  SoftmaxGradKernel() : SoftmaxKernel<Fwd, Bwd>(/*backward=*/true) {}
};

using Softmax = SoftmaxKernel<dnnl::softmax_forward, dnnl::softmax_backward>;
using SoftmaxGrad = SoftmaxGradKernel<dnnl::softmax_forward, dnnl::softmax_backward>;
using LogSoftmax = SoftmaxKernel<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>;
using LogSoftmaxGrad = SoftmaxGradKernel<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>;

using cpu::UnaryGradKernel;
using cpu::UnaryKernel;

NEREID_REGISTER_KERNEL("Relu", kCpu, DT_FLOAT, UnaryKernel<Relu>);
NEREID_REGISTER_KERNEL("ReluGrad", kCpu, DT_FLOAT, UnaryGradKernel<ReluGrad>);
NEREID_REGISTER_KERNEL("Sigmoid", kCpu, DT_FLOAT, UnaryKernel<Sigmoid>);
NEREID_REGISTER_KERNEL("SigmoidGrad", kCpu, DT_FLOAT, UnaryGradKernel<SigmoidGrad>);
NEREID_REGISTER_KERNEL("Tanh", kCpu, DT_FLOAT, UnaryKernel<Tanh>);
NEREID_REGISTER_KERNEL("TanhGrad", kCpu, DT_FLOAT, UnaryGradKernel<TanhGrad>);
NEREID_REGISTER_KERNEL("Gelu", kCpu, DT_FLOAT, GeluKernel);
NEREID_REGISTER_KERNEL("GeluGrad", kCpu, DT_FLOAT, GeluGradKernel);
NEREID_REGISTER_KERNEL("Clip", kCpu, DT_FLOAT, UnaryKernel<Clip>);
NEREID_REGISTER_KERNEL("ClipGrad", kCpu, DT_FLOAT, UnaryGradKernel<ClipGrad>);
NEREID_REGISTER_KERNEL("HardSigmoid", kCpu, DT_FLOAT, UnaryKernel<HardSigmoid>);
NEREID_REGISTER_KERNEL("HardSigmoidGrad", kCpu, DT_FLOAT, UnaryGradKernel<HardSigmoidGrad>);
NEREID_REGISTER_KERNEL("HardSwish", kCpu, DT_FLOAT, UnaryKernel<HardSwish>);
NEREID_REGISTER_KERNEL("HardSwishGrad", kCpu, DT_FLOAT, UnaryGradKernel<HardSwishGrad>);
NEREID_REGISTER_KERNEL("Softmax", kCpu, DT_FLOAT, Softmax);
NEREID_REGISTER_KERNEL("SoftmaxGrad", kCpu, DT_FLOAT, SoftmaxGrad);
NEREID_REGISTER_KERNEL("LogSoftmax", kCpu, DT_FLOAT, LogSoftmax);
NEREID_REGISTER_KERNEL("LogSoftmaxGrad", kCpu, DT_FLOAT, LogSoftmaxGrad);

}  // namespace
}  // namespace nereid
