#ifndef NEREID_OPS_CPU_ELEMENTWISE_LOOPS_H_
#define NEREID_OPS_CPU_ELEMENTWISE_LOOPS_H_

// The kernels every elementwise op shares, parameterised by a functor:
//   UnaryKernel<F>          y[i] = f(x[i])
//   UnaryGradKernel<G>      dx[i] = g(dy[i], v[i])   (v: the op's x or y)
//   BroadcastKernel<N, F>   y = f(in0, .., inN-1) with NumPy broadcasting
// A functor with a constructor taking the node's attributes gets them (Clip's
// bounds); the others are default-constructed. Loops split over the
// kernel's threads with cpu::ParallelFor, so results do not depend on them.

#include <array>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace cpu {

template <typename F>
F MakeFunctor(const AttrMap& attrs) {
  if constexpr (std::is_constructible_v<F, const AttrMap&>) {
    return F(attrs);
  } else {
    return F();
  }
}

template <typename F>
class UnaryKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    f_ = MakeFunctor<F>(attrs);
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const float* x = ctx->input(0).data<float>();
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    float* out = y->data<float>();
    ParallelFor(ctx, y->num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = f_.Apply(x[i]);
    });
    return absl::OkStatus();
  }

 private:
  F f_;
};

template <typename G>
class UnaryGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    g_ = MakeFunctor<G>(attrs);
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    if (ctx->input(0).dims() != ctx->input(1).dims()) {
      return absl::InvalidArgumentError(absl::StrCat("dy ", ctx->input(0).DebugString(), " and ",
                                                     ctx->input(1).DebugString(), " differ"));
    }
    const float* dy = ctx->input(0).data<float>();
    const float* v = ctx->input(1).data<float>();
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    float* out = dx->data<float>();
    ParallelFor(ctx, dx->num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = g_.Apply(dy[i], v[i]);
    });
    return absl::OkStatus();
  }

 private:
  G g_;
};

// Strides of `in` seen from an output of dims `out`: aligned at the right,
// 0 where `in` is broadcast.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);
// When an input of dims `in` broadcast to `out` repeats itself whole (its
// dims, leading 1s aside, are the last dims of `out`: a bias over the last
// axis, a scalar, or no broadcast at all), its element count: output element
// i reads input element i % period. Otherwise 0.
int64_t RepeatPeriod(const std::vector<int64_t>& in, const std::vector<int64_t>& out);
// The offset into an input with `strides` of output element `index`.
int64_t BroadcastOffset(int64_t index, const std::vector<int64_t>& out, const std::vector<int64_t>& strides);

// F::Apply takes N floats, one per input.
template <int N, typename F>
class BroadcastKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const std::vector<int64_t>& dims = y->dims();
    std::array<const float*, N> in;
    std::array<std::vector<int64_t>, N> strides;
    std::array<int64_t, N> period;
    bool same = true, periodic = true;
    for (int k = 0; k < N; ++k) {
      in[k] = ctx->input(k).data<float>();
      strides[k] = BroadcastStrides(ctx->input(k).dims(), dims);
      same = same && ctx->input(k).dims() == dims;
      period[k] = RepeatPeriod(ctx->input(k).dims(), dims);
      periodic = periodic && period[k] > 0;
    }
    float* out = y->data<float>();
    ParallelFor(ctx, y->num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      if (same) {
        for (int64_t i = begin; i < end; ++i) out[i] = Call(in, i, std::make_integer_sequence<int, N>{});
        return;
      }
      std::array<int64_t, N> offsets;
      if (periodic) {  // 10x the general path for a bias or a scalar
        // Offsets advance and wrap; a division per element and input cost
        // 5 ns an element (a transformer's bias adds: 20% of its step).
        for (int k = 0; k < N; ++k) offsets[k] = begin % period[k];
        for (int64_t i = begin; i < end; ++i) {
          out[i] = CallAt(in, offsets, std::make_integer_sequence<int, N>{});
          for (int k = 0; k < N; ++k) {
            if (++offsets[k] == period[k]) offsets[k] = 0;
          }
        }
        return;
      }
      for (int64_t i = begin; i < end; ++i) {
        for (int k = 0; k < N; ++k) offsets[k] = BroadcastOffset(i, dims, strides[k]);
        out[i] = CallAt(in, offsets, std::make_integer_sequence<int, N>{});
      }
    });
    return absl::OkStatus();
  }

 private:
  template <int... K>
  static float Call(const std::array<const float*, N>& in, int64_t i, std::integer_sequence<int, K...>) {
    return F::Apply(in[K][i]...);
  }
  template <int... K>
  static float CallAt(const std::array<const float*, N>& in, const std::array<int64_t, N>& at,
                      std::integer_sequence<int, K...>) {
    return F::Apply(in[K][at[K]]...);
  }
};

}  // namespace cpu
}  // namespace nereid

#endif  // NEREID_OPS_CPU_ELEMENTWISE_LOOPS_H_
