// ReduceSum / ReduceMean / ReduceMax and their gradients. The output's
// elements, laid out as x's dims with the reduced ones set to 1 (whether or
// not they are kept: the order is the same), are found through broadcast
// strides. Reduced axes that form one block (the usual case: the last axis,
// or H and W) take a fast path over an [outer, reduced, inner] view,
// parallel over outputs, each summed in order.

#include <algorithm>
#include <limits>

#include "core/status_macros.h"
#include "ops/cpu/elementwise_loops.h"

namespace nereid {
namespace {

enum class Kind { kSum, kMean, kMax };

// x's dims with the reduced axes set to 1, and whether those axes are one
// contiguous block [first, last].
struct Reduction {
  std::vector<int64_t> kept;
  int first = -1, last = -1;
  bool contiguous = true;
  int64_t count = 1;  // elements reduced into each output
};

Reduction Describe(const std::vector<int64_t>& dims, const std::vector<int64_t>& axes) {
  Reduction r;
  r.kept = dims;
  const int rank = static_cast<int>(dims.size());
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + rank : a] = true;
  for (int i = 0; i < rank; ++i) {
    if (!reduced[i]) continue;
    if (r.first < 0) r.first = i;
    if (r.last >= 0 && r.last != i - 1) r.contiguous = false;
    r.last = i;
    r.kept[i] = 1;
    r.count *= dims[i];
  }
  return r;
}

std::vector<int64_t> AxesOf(const AttrMap& attrs) {
  const auto& given = attrs.at("axes")->list().i();
  return std::vector<int64_t>(given.begin(), given.end());
}

template <Kind kKind>
class ReduceKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axes_ = AxesOf(attrs);
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Reduction r = Describe(x.dims(), axes_);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const float* in = x.data<float>();
    float* out = y->data<float>();
    const float init = kKind == Kind::kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
    if (r.first < 0) {  // nothing reduced (a rank-0 input)
      std::copy(in, in + x.num_elements(), out);
      return absl::OkStatus();
    }
    if (r.contiguous) {
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < r.first; ++i) outer *= x.dim(i);
      for (int i = r.last + 1; i < x.rank(); ++i) inner *= x.dim(i);
      const int64_t n = r.count;
      if (inner == 1) {  // the reduced elements are adjacent
        cpu::ParallelFor(ctx, outer, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, n)),
                         [&](int64_t begin, int64_t end) {
                           for (int64_t o = begin; o < end; ++o) out[o] = Finish(Adjacent(in + o * n, n), n);
                         });
        return absl::OkStatus();
      }
      cpu::ParallelFor(ctx, outer * inner, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, n)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t j = begin; j < end; ++j) {
                           const float* src = in + (j / inner) * n * inner + j % inner;
                           float acc = init;
                           for (int64_t k = 0; k < n; ++k) acc = Combine(acc, src[k * inner]);
                           out[j] = Finish(acc, n);
                         }
                       });
      return absl::OkStatus();
    }
    std::fill(out, out + y->num_elements(), init);
    std::vector<int64_t> strides = cpu::BroadcastStrides(r.kept, x.dims());
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      float& acc = out[cpu::BroadcastOffset(i, x.dims(), strides)];
      acc = Combine(acc, in[i]);
    }
    for (int64_t j = 0; j < y->num_elements(); ++j) out[j] = Finish(out[j], r.count);
    return absl::OkStatus();
  }

 private:
  static float Combine(float acc, float v) { return kKind == Kind::kMax ? std::max(acc, v) : acc + v; }
  static float Finish(float acc, int64_t n) { return kKind == Kind::kMean ? acc / static_cast<float>(n) : acc; }
  // n adjacent values: a sum in cpu::SumLanes's fixed order, or the largest.
  static float Adjacent(const float* src, int64_t n) {
    if constexpr (kKind == Kind::kMax) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < n; ++k) top = std::max(top, src[k]);
      return top;
    } else {
      return cpu::SumLanes(src, n);
    }
  }

  std::vector<int64_t> axes_;
};

// (dy, x[, y]) -> dx of x's shape: dy[out(i)] (scaled for a mean; for a max
// only where x[i] equals y[out(i)]).
template <Kind kKind>
class ExpandKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axes_ = AxesOf(attrs);
    auto mean = attrs.find("mean");
    mean_ = mean != attrs.end() && mean->second->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    Reduction r = Describe(x.dims(), axes_);
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    const std::vector<int64_t> strides = cpu::BroadcastStrides(r.kept, x.dims());
    const float scale = mean_ ? 1.0f / static_cast<float>(r.count) : 1.0f;
    const float* pdy = dy.data<float>();
    const float* px = x.data<float>();
    const float* py = kKind == Kind::kMax ? ctx->input(2).data<float>() : nullptr;
    float* out = dx->data<float>();
    if (r.contiguous && r.first >= 0) {
      // [outer, n, inner] of x against [outer, inner] of dy: no index arithmetic per element.
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < r.first; ++i) outer *= x.dim(i);
      for (int i = r.last + 1; i < x.rank(); ++i) inner *= x.dim(i);
      const int64_t n = r.count;
      if (inner == 1) {  // runs of n elements share one gradient value
        cpu::ParallelFor(ctx, outer * n, cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
          int64_t o = begin / n, k = begin % n;
          for (int64_t j = begin; j < end; k = 0, ++o) {
            const int64_t run = std::min(end - j, n - k);
            if constexpr (kKind == Kind::kMax) {
              for (int64_t t = j; t < j + run; ++t) out[t] = px[t] == py[o] ? pdy[o] : 0.0f;
            } else {
              std::fill(out + j, out + j + run, pdy[o] * scale);
            }
            j += run;
          }
        });
        return absl::OkStatus();
      }
      cpu::ParallelFor(ctx, outer * n, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, inner)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t j = begin; j < end; ++j) {
                           const int64_t o = j / n;
                           const float* g = pdy + o * inner;
                           float* dst = out + j * inner;
                           if constexpr (kKind == Kind::kMax) {
                             const float* src = px + j * inner;
                             const float* top = py + o * inner;
                             for (int64_t i = 0; i < inner; ++i) dst[i] = src[i] == top[i] ? g[i] : 0.0f;
                           } else {
                             for (int64_t i = 0; i < inner; ++i) dst[i] = g[i] * scale;
                           }
                         }
                       });
      return absl::OkStatus();
    }
    cpu::ParallelFor(ctx, x.num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t o = cpu::BroadcastOffset(i, x.dims(), strides);
        if constexpr (kKind == Kind::kMax) {
          out[i] = px[i] == py[o] ? pdy[o] : 0.0f;
        } else {
          out[i] = pdy[o] * scale;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> axes_;
  bool mean_ = false;
};

NEREID_REGISTER_KERNEL("ReduceSum", kCpu, DT_FLOAT, ReduceKernel<Kind::kSum>);
NEREID_REGISTER_KERNEL("ReduceMean", kCpu, DT_FLOAT, ReduceKernel<Kind::kMean>);
NEREID_REGISTER_KERNEL("ReduceMax", kCpu, DT_FLOAT, ReduceKernel<Kind::kMax>);
NEREID_REGISTER_KERNEL("ExpandReduced", kCpu, DT_FLOAT, ExpandKernel<Kind::kSum>);
NEREID_REGISTER_KERNEL("ReduceMaxGrad", kCpu, DT_FLOAT, ExpandKernel<Kind::kMax>);

}  // namespace
}  // namespace nereid
