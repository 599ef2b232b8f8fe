// Conv2D forward and both backward passes through oneDNN, NCHW activations
// and OIHW (grouped: GOIHW) filters in plain layouts, primitives cached per
// input shape.

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

enum class ConvPass { kForward, kBackwardData, kBackwardWeights };

class ConvKernel : public OpKernel {
 public:
  explicit ConvKernel(ConvPass pass) : pass_(pass) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    window_ = cpu::ReadWindowAttrs(attrs);
    groups_ = attrs.at("groups")->i();
    return absl::OkStatus();
  }

  // Inputs: forward (x, filter); backward (x, filter, dy).
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& f = ctx->input(1);
    std::vector<int64_t> y_dims = pass_ == ConvPass::kForward ? ctx->output_dims(0) : ctx->input(2).dims();
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Primitive* p, Get(x.dims(), f.dims(), y_dims));
    int64_t work = y_dims[0] * y_dims[1] * y_dims[2] * y_dims[3] * f.dim(1) * f.dim(2) * f.dim(3);
    int threads = ctx->AcquireThreads(work, 1 << 17);
    switch (pass_) {
      case ConvPass::kForward:
        return cpu::RunPrimitive(p->primitive,
                                 {{DNNL_ARG_SRC, cpu::Wrap(p->x, x)},
                                  {DNNL_ARG_WEIGHTS, cpu::Wrap(p->f, f)},
                                  {DNNL_ARG_DST, cpu::Wrap(p->y, *out)}},
                                 threads, "convolution");
      case ConvPass::kBackwardData:
        return cpu::RunPrimitive(p->primitive,
                                 {{DNNL_ARG_DIFF_DST, cpu::Wrap(p->y, ctx->input(2))},
                                  {DNNL_ARG_WEIGHTS, cpu::Wrap(p->f, f)},
                                  {DNNL_ARG_DIFF_SRC, cpu::Wrap(p->x, *out)}},
                                 threads, "convolution backward data");
      case ConvPass::kBackwardWeights:
        return cpu::RunPrimitive(p->primitive,
                                 {{DNNL_ARG_SRC, cpu::Wrap(p->x, x)},
                                  {DNNL_ARG_DIFF_DST, cpu::Wrap(p->y, ctx->input(2))},
                                  {DNNL_ARG_DIFF_WEIGHTS, cpu::Wrap(p->f, *out)}},
                                 threads, "convolution backward weights");
    }
    return absl::InternalError("unknown convolution pass");
  }

 private:
  struct Primitive {
    memory::desc x, f, y;
    dnnl::primitive primitive;
  };

  absl::StatusOr<const Primitive*> Get(const std::vector<int64_t>& xd, const std::vector<int64_t>& fd,
                                       const std::vector<int64_t>& yd) {
    std::vector<int64_t> key = xd;
    key.insert(key.end(), fd.begin(), fd.end());
    return cache_.Get(key, [&] { return Build(xd, fd, yd); }, "convolution");
  }

  Primitive Build(const std::vector<int64_t>& xd, const std::vector<int64_t>& fd,
                  const std::vector<int64_t>& yd) const {
    {
      Primitive p;
      p.x = memory::desc({xd.begin(), xd.end()}, memory::data_type::f32, tag::nchw);
      p.y = memory::desc({yd.begin(), yd.end()}, memory::data_type::f32, tag::nchw);
      if (groups_ == 1) {
        p.f = memory::desc({fd.begin(), fd.end()}, memory::data_type::f32, tag::oihw);
      } else {
        p.f = memory::desc({groups_, fd[0] / groups_, fd[1], fd[2], fd[3]}, memory::data_type::f32, tag::goihw);
      }
      cpu::ResolvedWindow w = cpu::Resolve(window_, xd[2], xd[3], yd[2], yd[3], fd[2], fd[3]);
      const dnnl::engine& eng = cpu::CpuEngine();
      dnnl::convolution_forward::primitive_desc fwd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, p.x,
                                          p.f, p.y, w.strides, w.dilations, w.pad_l, w.pad_r),
          eng);
      if (pass_ == ConvPass::kForward) {
        p.primitive = dnnl::convolution_forward(fwd);
      } else if (pass_ == ConvPass::kBackwardData) {
        dnnl::convolution_backward_data::primitive_desc bwd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, p.x, p.f, p.y, w.strides,
                                                  w.dilations, w.pad_l, w.pad_r),
            eng, fwd);
        p.primitive = dnnl::convolution_backward_data(bwd);
      } else {
        dnnl::convolution_backward_weights::primitive_desc bwd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, p.x, p.f, p.y, w.strides,
                                                     w.dilations, w.pad_l, w.pad_r),
            eng, fwd);
        p.primitive = dnnl::convolution_backward_weights(bwd);
      }
      return p;
    }
  }

  ConvPass pass_;
  cpu::WindowAttrs window_;
  int64_t groups_ = 1;
  cpu::PrimitiveCache<std::vector<int64_t>, Primitive> cache_;
};

class Conv2DKernel : public ConvKernel {
 public:
  Conv2DKernel() : ConvKernel(ConvPass::kForward) {}
};
class Conv2DBackpropInputKernel : public ConvKernel {
 public:
  Conv2DBackpropInputKernel() : ConvKernel(ConvPass::kBackwardData) {}
};
class Conv2DBackpropFilterKernel : public ConvKernel {
 public:
  Conv2DBackpropFilterKernel() : ConvKernel(ConvPass::kBackwardWeights) {}
};

NEREID_REGISTER_KERNEL("Conv2D", kCpu, DT_FLOAT, Conv2DKernel);
NEREID_REGISTER_KERNEL("Conv2DBackpropInput", kCpu, DT_FLOAT, Conv2DBackpropInputKernel);
NEREID_REGISTER_KERNEL("Conv2DBackpropFilter", kCpu, DT_FLOAT, Conv2DBackpropFilterKernel);

}  // namespace
}  // namespace nereid
