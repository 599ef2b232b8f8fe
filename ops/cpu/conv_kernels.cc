// Conv2D forward and both backward passes through oneDNN. Tensors stay NCHW
// activations and OIHW (grouped: GOIHW) filters; each primitive runs in the
// layouts oneDNN prefers, with reorders around it. Primitives and reorders
// are cached per input shape.

#include <array>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/single_channel_conv.h"
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
    if (pass_ != ConvPass::kBackwardData && x.dim(1) == 1) {
      cpu::ResolvedWindow w = cpu::Resolve(window_, x.dim(2), x.dim(3), y_dims[2], y_dims[3], f.dim(2), f.dim(3));
      cpu::SingleChannelConvShape s{x.dim(0),  x.dim(2),   x.dim(3),   f.dim(0), f.dim(2),
                                    f.dim(3),  y_dims[2],  y_dims[3],  w.pad_l[0], w.pad_l[1]};
      if (cpu::SingleChannelConvApplies(s, x.dim(1), groups_, w.strides[0], w.strides[1], w.dilations[0] + 1,
                                        w.dilations[1] + 1)) {
        return ComputeSingleChannel(ctx, s, out);
      }
    }
    int64_t work = y_dims[0] * y_dims[1] * y_dims[2] * y_dims[3] * f.dim(1) * f.dim(2) * f.dim(3);
    int threads = ctx->AcquireThreads(work, 1 << 17);
    ASSIGN_OR_RETURN(const Primitive* p, Get(x.dims(), f.dims(), y_dims, threads));
    // Which tensor plays which oneDNN argument in this pass; the last one is
    // the output.
    const Tensor* dy = pass_ == ConvPass::kForward ? nullptr : &ctx->input(2);
    std::array<std::pair<int, const Tensor*>, 3> args;
    switch (pass_) {
      case ConvPass::kForward:
        args = {{{DNNL_ARG_SRC, &x}, {DNNL_ARG_WEIGHTS, &f}, {DNNL_ARG_DST, out}}};
        break;
      case ConvPass::kBackwardData:
        args = {{{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, &f}, {DNNL_ARG_DIFF_SRC, out}}};
        break;
      case ConvPass::kBackwardWeights:
        args = {{{DNNL_ARG_SRC, &x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, out}}};
        break;
    }
    std::unordered_map<int, memory> primitive_args;
    std::array<Tensor, 3> staged;  // operands in the primitive's own layout
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(primitive_args[args[i].first], p->operands[i].Input(*args[i].second, &staged[i], threads));
    }
    ASSIGN_OR_RETURN(memory result, p->operands[2].Output(*out, &staged[2]));
    primitive_args[args[2].first] = result;
    RETURN_IF_ERROR(
        cpu::RunPrimitive(p->primitive, primitive_args, threads, kWhat[static_cast<int>(pass_)], &p->scratchpad));
    return p->operands[2].FinishOutput(result, *out, threads);
  }

 private:
  // The forward pass or the filter's gradient of a one-channel input,
  // directly (ops/cpu/single_channel_conv.h).
  absl::Status ComputeSingleChannel(OpKernelContext* ctx, const cpu::SingleChannelConvShape& s, Tensor* out) {
    ASSIGN_OR_RETURN(Tensor padded, Tensor::Allocate(DT_FLOAT, {s.batch, cpu::PaddedHeight(s), cpu::PaddedWidth(s)}));
    const float* x = ctx->input(0).data<float>();
    float* images = padded.data<float>();
    cpu::ParallelFor(ctx, s.batch, 1, [&](int64_t begin, int64_t end) { cpu::PadImages(s, x, begin, end, images); });
    if (pass_ == ConvPass::kForward) {
      const float* filter = ctx->input(1).data<float>();
      float* y = out->data<float>();
      cpu::ParallelFor(ctx, s.batch, 1, [&](int64_t begin, int64_t end) {
        cpu::SingleChannelConvForward(s, images, filter, y, begin, end);
      });
    } else {
      const float* dy = ctx->input(2).data<float>();
      float* grad = out->data<float>();
      cpu::ParallelFor(ctx, s.out_channels, 1, [&](int64_t begin, int64_t end) {
        cpu::SingleChannelConvFilterGrad(s, images, dy, grad, begin, end);
      });
    }
    return absl::OkStatus();
  }

  static constexpr const char* kWhat[] = {"convolution", "convolution backward data", "convolution backward weights"};

  // The primitive runs in the layouts oneDNN chose for this shape and
  // machine (format_tag::any); on plain NCHW it falls back to im2col+GEMM,
  // 2-9x slower here than its direct JIT kernels even with the reorders.
  // Its scratchpad is ours (scratchpad_mode::user; RunPrimitive's shared
  // one): with the library's, Winograd convolutions run from the executor's
  // threads crashed or corrupted the heap with --threads 2 (2 runs in 3 of
  // vgg11 at batch 16); with ours they run clean and bit for bit repeatable.
  struct Primitive {
    std::array<cpu::Relayout, 3> operands;  // in the order Compute lists the args
    dnnl::primitive primitive;
    memory::desc scratchpad;
  };

  absl::StatusOr<const Primitive*> Get(const std::vector<int64_t>& xd, const std::vector<int64_t>& fd,
                                       const std::vector<int64_t>& yd, int threads) {
    std::vector<int64_t> key = xd;
    key.insert(key.end(), fd.begin(), fd.end());
    return cache_.Get(key, threads, [&] { return Build(xd, fd, yd); }, "convolution");
  }

  Primitive Build(const std::vector<int64_t>& xd, const std::vector<int64_t>& fd,
                  const std::vector<int64_t>& yd) const {
    using dt = memory::data_type;
    memory::desc x({xd.begin(), xd.end()}, dt::f32, tag::nchw);
    memory::desc y({yd.begin(), yd.end()}, dt::f32, tag::nchw);
    memory::desc f = groups_ == 1 ? memory::desc({fd.begin(), fd.end()}, dt::f32, tag::oihw)
                                  : memory::desc({groups_, fd[0] / groups_, fd[1], fd[2], fd[3]}, dt::f32, tag::goihw);
    memory::desc x_any(x.dims(), dt::f32, tag::any), y_any(y.dims(), dt::f32, tag::any),
        f_any(f.dims(), dt::f32, tag::any);
    cpu::ResolvedWindow w = cpu::Resolve(window_, xd[2], xd[3], yd[2], yd[3], fd[2], fd[3]);
    const dnnl::engine& eng = cpu::CpuEngine();
    // convolution_auto: oneDNN takes Winograd (F(4x4, 3x3)) where it
    // expects it to be faster, for vgg11's 3x3 convolutions on this
    // machine's AVX-512, and its direct kernels elsewhere.
    const dnnl::algorithm algorithm = dnnl::algorithm::convolution_auto;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, x_any, f_any, y_any, w.strides,
                                        w.dilations, w.pad_l, w.pad_r),
        attr, eng);
    Primitive p;
    auto In = cpu::Relayout::ForInput;
    auto Out = cpu::Relayout::ForOutput;
    if (pass_ == ConvPass::kForward) {
      p.operands = {In(x, fwd.src_desc()), In(f, fwd.weights_desc()), Out(y, fwd.dst_desc())};
      p.primitive = dnnl::convolution_forward(fwd);
      p.scratchpad = fwd.scratchpad_desc();
    } else if (pass_ == ConvPass::kBackwardData) {
      dnnl::convolution_backward_data::primitive_desc bwd(
          dnnl::convolution_backward_data::desc(algorithm, x_any, f_any, y_any, w.strides,
                                                w.dilations, w.pad_l, w.pad_r),
          attr, eng, fwd);
      p.operands = {In(y, bwd.diff_dst_desc()), In(f, bwd.weights_desc()), Out(x, bwd.diff_src_desc())};
      p.primitive = dnnl::convolution_backward_data(bwd);
      p.scratchpad = bwd.scratchpad_desc();
    } else {
      dnnl::convolution_backward_weights::primitive_desc bwd(
          dnnl::convolution_backward_weights::desc(algorithm, x_any, f_any, y_any, w.strides,
                                                   w.dilations, w.pad_l, w.pad_r),
          attr, eng, fwd);
      p.operands = {In(x, bwd.src_desc()), In(y, bwd.diff_dst_desc()), Out(f, bwd.diff_weights_desc())};
      p.primitive = dnnl::convolution_backward_weights(bwd);
      p.scratchpad = bwd.scratchpad_desc();
    }
    return p;
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
