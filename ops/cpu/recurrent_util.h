#ifndef NEREID_OPS_CPU_RECURRENT_UTIL_H_
#define NEREID_OPS_CPU_RECURRENT_UTIL_H_

// What the fused recurrent layers (LstmLayer, GruLayer) share: the sizes of
// one direction over a time-major sequence and the order it visits the
// steps, the GEMM thread count, oneDNN's vectorised logistic / tanh on dense
// blocks (a step's gates at once), and the parts of the gradient through
// time that do not depend on the cell.

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace cpu {

struct RecurrentShape {
  int64_t steps, batch, in, hidden, gates;  // gates: columns of the gate block (4H, 3H)
  bool reverse;

  // The step visited s-th.
  int64_t StepAt(int64_t s) const { return reverse ? steps - 1 - s : s; }
  int64_t state() const { return batch * hidden; }  // floats of one step's h
};

inline RecurrentShape RecurrentShapeOf(const Tensor& x, int64_t hidden, int gates_per_unit, bool reverse) {
  return RecurrentShape{x.dim(0), x.dim(1), x.dim(2), hidden, gates_per_unit * hidden, reverse};
}

// GEMM threads for the layer's largest product: the executor's reservation,
// fixed by the first request.
inline int RecurrentGemmThreads(OpKernelContext* ctx, const RecurrentShape& s) {
  return ctx->AcquireThreads(s.steps * s.batch * s.gates * std::max(s.in, s.hidden), int64_t{1} << 17);
}

// The input side of every step at once: gates ([T*B, G]) = x W^T, with x
// ([T, B, I]) and W ([G, I]) the layer's inputs 0 and 1.
inline absl::Status ProjectInputs(OpKernelContext* ctx, const RecurrentShape& s, float* gates, int threads) {
  return Sgemm(false, true, s.steps * s.batch, s.gates, s.in, 1.0f, ctx->input(0).data<float>(),
               ctx->input(1).data<float>(), 0.0f, gates, threads);
}

// Allocates outputs 0..n-1 into out[0..n-1]; zero-filled if `zeroed` (a
// gradient's outputs, which its GEMMs add into).
inline absl::Status AllocateRecurrentOutputs(OpKernelContext* ctx, int n, Tensor** out, bool zeroed) {
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(out[i], ctx->AllocateOutput(i));
    if (zeroed) std::fill_n(out[i]->data<float>(), out[i]->num_elements(), 0.0f);
  }
  return absl::OkStatus();
}

// What a layer's gradient reads first: x, w and r, the forward pass's y, its
// gates and one more tensor it saved per step (LSTM's cells, GRU's reset
// terms), then dy and dh_last where the layer's attributes say they are
// there (else null). `next` is the index of the input after them.
struct RecurrentGradInputs {
  const float *x, *w, *r, *y, *gates, *saved, *dy, *dh_last;
  int next;
};

inline RecurrentGradInputs ReadRecurrentGradInputs(OpKernelContext* ctx, bool has_dy, bool has_dh_last) {
  RecurrentGradInputs in;
  in.x = ctx->input(0).data<float>();
  in.w = ctx->input(1).data<float>();
  in.r = ctx->input(2).data<float>();
  in.y = ctx->input(3).data<float>();
  in.gates = ctx->input(4).data<float>();
  in.saved = ctx->input(5).data<float>();
  in.next = 6;
  in.dy = has_dy ? ctx->input(in.next++).data<float>() : nullptr;
  in.dh_last = has_dh_last ? ctx->input(in.next++).data<float>() : nullptr;
  return in;
}

// The input side's gradients from dG ([T*B, G], every step's pre-activation
// gradients): dx = dG W, dw = dG^T x.
inline absl::Status InputGrads(const RecurrentShape& s, const float* dg, const float* x, const float* w, float* dx,
                               float* dw, int threads) {
  const int64_t rows = s.steps * s.batch;
  RETURN_IF_ERROR(Sgemm(false, false, rows, s.in, s.gates, 1.0f, dg, w, 0.0f, dx, threads));
  return Sgemm(true, false, s.gates, s.in, rows, 1.0f, dg, x, 0.0f, dw, threads);
}

// dr ([cols, H], zeroed before) = the sum over steps of dG_t^T h_{t-1}, over
// the first `cols` gate columns of dG (rows s.gates apart): the steps after
// the first read y one step back (forward: dG[1:] with y[:-1]; reverse:
// dG[:-1] with y[1:]), the first reads h0 (none: no term).
inline absl::Status RecurrentWeightGrad(const RecurrentShape& s, const float* dg, int64_t cols, const float* y,
                                        const float* h0, float* dr, int threads) {
  const int64_t g = s.gates, h = s.hidden;
  const int64_t later_rows = (s.steps - 1) * s.batch;
  if (later_rows > 0) {
    const float* dg_later = s.reverse ? dg : dg + s.batch * g;
    const float* h_before = s.reverse ? y + s.state() : y;
    RETURN_IF_ERROR(Sgemm(true, false, cols, h, later_rows, 1.0f, dg_later, g, h_before, h, 0.0f, dr, h, threads));
  }
  if (h0 != nullptr) {
    const float* dg_first = dg + s.StepAt(0) * s.batch * g;
    RETURN_IF_ERROR(Sgemm(true, false, cols, h, s.batch, 1.0f, dg_first, g, h0, h, 1.0f, dr, h, threads));
  }
  return absl::OkStatus();
}

// An elementwise oneDNN primitive (logistic or tanh) over n dense floats,
// in place or into another buffer.
class DenseEltwise {
 public:
  absl::Status Run(dnnl::algorithm algorithm, const float* src, float* dst, int64_t n, int threads) {
    if (n == 0) return absl::OkStatus();
    dnnl::memory::desc md = PlainDesc({n});
    ASSIGN_OR_RETURN(const dnnl::primitive* p, cache_.Get(std::make_pair(static_cast<int>(algorithm), n), threads, [&] {
      return dnnl::primitive(dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, algorithm, md, 0.0f, 0.0f), CpuEngine())));
    }, "recurrent eltwise"));
    return RunPrimitive(*p,
                        {{DNNL_ARG_SRC, dnnl::memory(md, CpuEngine(), const_cast<float*>(src))},
                         {DNNL_ARG_DST, dnnl::memory(md, CpuEngine(), dst)}},
                        threads, "recurrent eltwise");
  }

 private:
  PrimitiveCache<std::pair<int, int64_t>, dnnl::primitive> cache_;
};

// Column sums of a [rows, cols] matrix added into out[cols] (a bias gradient).
inline void AddColumnSums(const float* m, int64_t rows, int64_t cols, int64_t ld, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* src = m + row * ld;
    for (int64_t j = 0; j < cols; ++j) out[j] += src[j];
  }
}

}  // namespace cpu
}  // namespace nereid

#endif  // NEREID_OPS_CPU_RECURRENT_UTIL_H_
