// Max and average pooling through oneDNN; global average pooling as loops.
// MaxPoolGrad is a loop (see why at its kernel), and so is max pooling over
// 2x2 windows at stride 2 (faster than oneDNN on the plain layout, and the
// same first-largest rule as the gradient's).

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/window.h"

namespace nereid {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum class PoolPass { kForward, kBackward };

void ReadPoolAttrs(const AttrMap& attrs, cpu::WindowAttrs* window, std::vector<int64_t>* ksize) {
  *window = cpu::ReadWindowAttrs(attrs);
  const auto& k = attrs.at("ksize")->list().i();
  *ksize = {k[0], k[1]};
}

class PoolKernel : public OpKernel {
 public:
  PoolKernel(dnnl::algorithm algorithm, PoolPass pass) : algorithm_(algorithm), pass_(pass) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ReadPoolAttrs(attrs, &window_, &ksize_);
    return absl::OkStatus();
  }

  // Forward: (x) -> y. Backward (average pooling only; max pooling's is
  // MaxPoolGradKernel): (x, dy) -> dx.
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    std::vector<int64_t> y_dims = pass_ == PoolPass::kForward ? ctx->output_dims(0) : ctx->input(1).dims();
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    int64_t y_elements = y_dims[0] * y_dims[1] * y_dims[2] * y_dims[3];
    int threads = ctx->AcquireThreads(y_elements * ksize_[0] * ksize_[1], 1 << 16);
    ASSIGN_OR_RETURN(const Primitives* p, Get(x.dims(), y_dims, threads));
    if (pass_ == PoolPass::kForward) {
      return cpu::RunPrimitive(p->forward, {{DNNL_ARG_SRC, cpu::Wrap(p->x, x)}, {DNNL_ARG_DST, cpu::Wrap(p->y, *out)}},
                               threads, "pooling");
    }
    return cpu::RunPrimitive(
        p->backward, {{DNNL_ARG_DIFF_DST, cpu::Wrap(p->y, ctx->input(1))}, {DNNL_ARG_DIFF_SRC, cpu::Wrap(p->x, *out)}},
        threads, "pooling backward");
  }

 private:
  struct Primitives {
    memory::desc x, y;
    dnnl::primitive forward, backward;  // one of them, by pass_
  };

  absl::StatusOr<const Primitives*> Get(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, int threads) {
    return cache_.Get(xd, threads, [&] { return Build(xd, yd); }, "pooling");
  }

  Primitives Build(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd) const {
    Primitives p;
    p.x = cpu::PlainDesc(xd);
    p.y = cpu::PlainDesc(yd);
    cpu::ResolvedWindow w = cpu::Resolve(window_, xd[2], xd[3], yd[2], yd[3], ksize_[0], ksize_[1]);
    memory::dims kernel = {ksize_[0], ksize_[1]};
    const dnnl::engine& eng = cpu::CpuEngine();
    bool backward = pass_ == PoolPass::kBackward;
    dnnl::pooling_forward::primitive_desc fwd(
        dnnl::pooling_forward::desc(backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
                                    algorithm_, p.x, p.y, w.strides, kernel, w.pad_l, w.pad_r),
        eng);
    if (!backward) {
      p.forward = dnnl::pooling_forward(fwd);
    } else {
      p.backward = dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
          dnnl::pooling_backward::desc(algorithm_, p.x, p.y, w.strides, kernel, w.pad_l, w.pad_r), eng, fwd));
    }
    return p;
  }

 protected:
  dnnl::algorithm algorithm_;

 private:
  PoolPass pass_;
  cpu::WindowAttrs window_;
  std::vector<int64_t> ksize_;
  cpu::PrimitiveCache<std::vector<int64_t>, Primitives> cache_;
};

// 2x2 windows at stride 2 without padding (lenet's, VGG's): every input
// element is in at most one window.
bool Tiled2x2(const cpu::ResolvedWindow& w, const std::vector<int64_t>& ksize, int64_t in_h, int64_t in_w,
              int64_t out_h, int64_t out_w) {
  return ksize[0] == 2 && ksize[1] == 2 && w.strides[0] == 2 && w.strides[1] == 2 && w.pad_l[0] == 0 &&
         w.pad_l[1] == 0 && out_h * 2 <= in_h && out_w * 2 <= in_w;
}

#if defined(__SSE2__)
// mask ? x : y, lane by lane.
inline __m128 Select(__m128 mask, __m128 x, __m128 y) { return _mm_or_ps(_mm_and_ps(mask, x), _mm_andnot_ps(mask, y)); }

// Four 2x2 windows side by side, from 8 columns of two rows: their corners
// (a b over d e), which later corner wins by the first-largest rule (the
// scalar loops' comparisons, in their order: NaNs never win), and the
// largest of a, b, d.
struct FourWindows {
  __m128 e, m2, b_wins, d_wins, e_wins;
};

inline FourWindows CompareFour(const float* top, const float* bottom) {
  const __m128 t0 = _mm_loadu_ps(top), t1 = _mm_loadu_ps(top + 4);
  const __m128 b0 = _mm_loadu_ps(bottom), b1 = _mm_loadu_ps(bottom + 4);
  const __m128 a = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
  const __m128 b = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
  const __m128 d = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
  FourWindows w;
  w.e = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
  w.b_wins = _mm_cmpgt_ps(b, a);
  const __m128 m1 = Select(w.b_wins, b, a);
  w.d_wins = _mm_cmpgt_ps(d, m1);
  w.m2 = Select(w.d_wins, d, m1);
  w.e_wins = _mm_cmpgt_ps(w.e, w.m2);
  return w;
}
#endif

// One plane of Tiled2x2 max pooling: each window's first largest element
// (MaxPoolGrad's rule), with SSE2 four windows at a time.
void MaxPool2x2Plane(int64_t in_w, int64_t out_h, int64_t out_w, const float* x, float* y) {
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const float* top = x + 2 * oh * in_w;
    const float* bottom = top + in_w;
    float* out = y + oh * out_w;
    int64_t ow = 0;
#if defined(__SSE2__)
    for (; ow + 4 <= out_w; ow += 4) {
      const FourWindows w = CompareFour(top + 2 * ow, bottom + 2 * ow);
      _mm_storeu_ps(out + ow, Select(w.e_wins, w.e, w.m2));
    }
#endif
    for (; ow < out_w; ++ow) {
      const int64_t c = 2 * ow;
      const float a = top[c], b = top[c + 1], d = bottom[c], e = bottom[c + 1];
      const float m1 = b > a ? b : a;
      const float m2 = d > m1 ? d : m1;
      out[ow] = e > m2 ? e : m2;
    }
  }
}

// Tiled2x2 windows as the loop above (on lenet's first layer, batch 256:
// about four times oneDNN's speed on the plain layout); other windows by
// oneDNN.
class MaxPoolKernel : public PoolKernel {
 public:
  MaxPoolKernel() : PoolKernel(dnnl::algorithm::pooling_max, PoolPass::kForward) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ReadPoolAttrs(attrs, &window_, &ksize_);
    return PoolKernel::Init(node, attrs);
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const std::vector<int64_t> y_dims = ctx->output_dims(0);
    const int64_t in_h = x.dim(2), in_w = x.dim(3), out_h = y_dims[2], out_w = y_dims[3];
    if (!Tiled2x2(cpu::Resolve(window_, in_h, in_w, out_h, out_w, ksize_[0], ksize_[1]), ksize_, in_h, in_w, out_h,
                  out_w)) {
      return PoolKernel::Compute(ctx);
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (y->num_elements() == 0) return absl::OkStatus();
    const int64_t planes = x.dim(0) * x.dim(1), in_area = in_h * in_w, out_area = out_h * out_w;
    const float* in = x.data<float>();
    float* out = y->data<float>();
    cpu::ParallelFor(ctx, planes, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, in_area)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p) {
                         MaxPool2x2Plane(in_w, out_h, out_w, in + p * in_area, out + p * out_area);
                       }
                     });
    return absl::OkStatus();
  }

 private:
  cpu::WindowAttrs window_;
  std::vector<int64_t> ksize_;
};
// (x, dy) -> dx: each window's dy goes to the first largest x in it (ties
// in row-major order; windows reaching into padding ignore it). A loop, not
// oneDNN: oneDNN's max-pooling backward needs the workspace of a
// training-mode forward pass, and that pair cost 2.1 ms per step on lenet's
// first layer (64x6x28x28, blocked layout and reorders included; 2.5 ms on
// plain NCHW) against 1.1 ms for this loop (means over 200 steps of a
// --trace run each), which reads x and dy once.
class MaxPoolGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ReadPoolAttrs(attrs, &window_, &ksize_);
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    if (dx->num_elements() == 0) return absl::OkStatus();
    int64_t planes = x.dim(0) * x.dim(1), in_h = x.dim(2), in_w = x.dim(3);
    int64_t out_h = dy.dim(2), out_w = dy.dim(3);
    cpu::ResolvedWindow w = cpu::Resolve(window_, in_h, in_w, out_h, out_w, ksize_[0], ksize_[1]);
    const float* in = x.data<float>();
    const float* grad = dy.data<float>();
    float* out = dx->data<float>();
    int64_t in_area = in_h * in_w, out_area = out_h * out_w;
    cpu::ParallelFor(ctx, planes, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, in_area)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p) {
                         Plane(w, in_h, in_w, out_h, out_w, in + p * in_area, grad + p * out_area, out + p * in_area);
                       }
                     });
    return absl::OkStatus();
  }

 private:
  // One [in_h, in_w] plane: each window's dy to its argmax, the rest 0.
  void Plane(const cpu::ResolvedWindow& w, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, const float* x,
             const float* dy, float* dx) const {
    const int64_t kh = ksize_[0], kw = ksize_[1];
    if (Tiled2x2(w, ksize_, in_h, in_w, out_h, out_w)) return Grad2x2(in_h, in_w, out_h, out_w, x, dy, dx);
    std::fill(dx, dx + in_h * in_w, 0.0f);
    for (int64_t oh = 0; oh < out_h; ++oh) {
      const int64_t h0 = oh * w.strides[0] - w.pad_l[0];
      const int64_t h_begin = std::max<int64_t>(0, h0), h_end = std::min(in_h, h0 + kh);
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const int64_t w0 = ow * w.strides[1] - w.pad_l[1];
        const int64_t w_begin = std::max<int64_t>(0, w0), w_end = std::min(in_w, w0 + kw);
        int64_t best = -1;
        for (int64_t h = h_begin; h < h_end; ++h) {
          for (int64_t c = w_begin; c < w_end; ++c) {
            if (best < 0 || x[h * in_w + c] > x[best]) best = h * in_w + c;
          }
        }
        if (best >= 0) dx[best] += dy[oh * out_w + ow];
      }
    }
  }

  // 2x2 windows at stride 2 without padding (lenet's, VGG's): every input
  // element is in at most one window, so each window is read once and its
  // four dx written once, with the same first-largest rule as the loop above.
  // Twice as fast as the general loop on lenet's first layer; with SSE2,
  // four windows at a time, the same comparisons in the same order (so the
  // same winner, NaNs included, bit for bit).
  static void Grad2x2(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, const float* x, const float* dy,
                      float* dx) {
    for (int64_t oh = 0; oh < out_h; ++oh) {
      const float* top = x + 2 * oh * in_w;
      const float* bottom = top + in_w;
      float* dtop = dx + 2 * oh * in_w;
      float* dbottom = dtop + in_w;
      int64_t ow = 0;
#if defined(__SSE2__)
      for (; ow + 4 <= out_w; ow += 4) {
        const int64_t c = 2 * ow;
        const FourWindows w = CompareFour(top + c, bottom + c);
        const __m128 g = _mm_loadu_ps(dy + oh * out_w + ow);
        const __m128 to_e = _mm_and_ps(w.e_wins, g);
        const __m128 to_d = _mm_andnot_ps(w.e_wins, _mm_and_ps(w.d_wins, g));
        const __m128 later = _mm_or_ps(w.e_wins, w.d_wins);
        const __m128 to_b = _mm_andnot_ps(later, _mm_and_ps(w.b_wins, g));
        const __m128 to_a = _mm_andnot_ps(_mm_or_ps(later, w.b_wins), g);
        _mm_storeu_ps(dtop + c, _mm_unpacklo_ps(to_a, to_b));
        _mm_storeu_ps(dtop + c + 4, _mm_unpackhi_ps(to_a, to_b));
        _mm_storeu_ps(dbottom + c, _mm_unpacklo_ps(to_d, to_e));
        _mm_storeu_ps(dbottom + c + 4, _mm_unpackhi_ps(to_d, to_e));
      }
#endif
      for (; ow < out_w; ++ow) {
        const int64_t c = 2 * ow;
        // Selects, not branches: which element wins is data, and random.
        const float a = top[c], b = top[c + 1], d = bottom[c], e = bottom[c + 1];
        const bool b_wins = b > a;
        const float m1 = b_wins ? b : a;
        const bool d_wins = d > m1;
        const float m2 = d_wins ? d : m1;
        const int best = e > m2 ? 3 : d_wins ? 2 : b_wins ? 1 : 0;
        const float g = dy[oh * out_w + ow];
        dtop[c] = best == 0 ? g : 0.0f;
        dtop[c + 1] = best == 1 ? g : 0.0f;
        dbottom[c] = best == 2 ? g : 0.0f;
        dbottom[c + 1] = best == 3 ? g : 0.0f;
      }
      // An odd width leaves a column no window covers.
      for (int64_t c = 2 * out_w; c < in_w; ++c) dtop[c] = dbottom[c] = 0.0f;
    }
    // An odd height leaves rows no window covers.
    std::fill(dx + 2 * out_h * in_w, dx + in_h * in_w, 0.0f);
  }

  cpu::WindowAttrs window_;
  std::vector<int64_t> ksize_;
};
// count_padding picks oneDNN's divisor: the whole window or the part inside.
dnnl::algorithm AvgAlgorithm(const AttrMap& attrs) {
  return attrs.at("count_padding")->b() ? dnnl::algorithm::pooling_avg_include_padding
                                        : dnnl::algorithm::pooling_avg_exclude_padding;
}

class AvgPoolKernel : public PoolKernel {
 public:
  AvgPoolKernel() : PoolKernel(dnnl::algorithm::pooling_avg_exclude_padding, PoolPass::kForward) {}
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    algorithm_ = AvgAlgorithm(attrs);
    return PoolKernel::Init(node, attrs);
  }
};
class AvgPoolGradKernel : public PoolKernel {
 public:
  AvgPoolGradKernel() : PoolKernel(dnnl::algorithm::pooling_avg_exclude_padding, PoolPass::kBackward) {}
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    algorithm_ = AvgAlgorithm(attrs);
    return PoolKernel::Init(node, attrs);
  }
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
