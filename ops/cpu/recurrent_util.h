#ifndef NEREID_OPS_CPU_RECURRENT_UTIL_H_
#define NEREID_OPS_CPU_RECURRENT_UTIL_H_

// What the fused recurrent layers (LstmLayer, GruLayer) share: the sizes of
// one direction over a time-major sequence and the order it visits the
// steps, the GEMM thread count, and oneDNN's vectorised logistic / tanh on
// dense blocks (a step's gates at once).

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
