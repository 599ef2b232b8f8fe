// BatchMatMul through oneDNN's matmul primitive. Three shapes of work:
//   - one right-hand matrix (an nn.Linear on [B, T, K]): the left batch folds
//     into the rows, one [B*T, K] x [K, N] product;
//   - equal batches (attention's [B, H, T, D] @ [B, H, D, T]): one batched
//     primitive;
//   - broadcast batches: one product per output matrix, at offsets.
// Transposes are strides, never copies. MatMul is the case without batch
// dimensions, on plain [rows, cols] descriptors.

#include <algorithm>
#include <tuple>

#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/elementwise_loops.h"

namespace nereid {
namespace {

using dnnl::memory;

int64_t Product(const std::vector<int64_t>& dims, size_t end) {
  int64_t p = 1;
  for (size_t i = 0; i < end; ++i) p *= dims[i];
  return p;
}

class BatchMatMulKernel : public OpKernel {
 public:
  explicit BatchMatMulKernel(bool batched = true) : batched_(batched), what_(batched ? "batched matmul" : "matmul") {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    transpose_a_ = attrs.at("transpose_a")->b();
    transpose_b_ = attrs.at("transpose_b")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    const std::vector<int64_t>& dims = ctx->output_dims(0);
    const size_t rank = dims.size();
    const int64_t m = dims[rank - 2], n = dims[rank - 1];
    const int64_t k = a.dim(a.rank() - (transpose_a_ ? 2 : 1));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const int64_t count = Product(dims, rank - 2);
    if (y->num_elements() == 0) return absl::OkStatus();
    if (k == 0) {
      std::fill(y->data<float>(), y->data<float>() + y->num_elements(), 0.0f);
      return absl::OkStatus();
    }
    const int64_t count_a = Product(a.dims(), a.rank() - 2), count_b = Product(b.dims(), b.rank() - 2);
    int threads = ctx->AcquireThreads(count * m * n * k, 1 << 17);
    float* out = y->data<float>();
    if (count_b == 1 && count_a == count && !transpose_a_) {
      ASSIGN_OR_RETURN(const Primitive* p, Get(1, count * m, k, n, threads));
      return Run(*p, a.data<float>(), b.data<float>(), out, threads);
    }
    if (count_a == count && count_b == count) {
      ASSIGN_OR_RETURN(const Primitive* p, Get(count, m, k, n, threads));
      return Run(*p, a.data<float>(), b.data<float>(), out, threads);
    }
    std::vector<int64_t> batch(dims.begin(), dims.end() - 2);
    std::vector<int64_t> strides_a =
        cpu::BroadcastStrides(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2), batch);
    std::vector<int64_t> strides_b =
        cpu::BroadcastStrides(std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2), batch);
    ASSIGN_OR_RETURN(const Primitive* p, Get(1, m, k, n, threads));
    for (int64_t t = 0; t < count; ++t) {
      const float* pa = a.data<float>() + cpu::BroadcastOffset(t, batch, strides_a) * m * k;
      const float* pb = b.data<float>() + cpu::BroadcastOffset(t, batch, strides_b) * k * n;
      RETURN_IF_ERROR(Run(*p, pa, pb, out + t * m * n, threads));
    }
    return absl::OkStatus();
  }

 private:
  struct Primitive {
    memory::desc a, b, y;
    dnnl::matmul matmul;
  };

  // `count` row-major [rows, cols] matrices, or their transposes seen
  // through strides; for MatMul (count 1) one plain [rows, cols].
  memory::desc Matrices(int64_t count, int64_t rows, int64_t cols, bool transposed) const {
    if (!batched_) {
      return memory::desc({rows, cols}, memory::data_type::f32,
                          transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
    }
    return memory::desc({count, rows, cols}, memory::data_type::f32,
                        transposed ? memory::dims{rows * cols, 1, rows} : memory::dims{rows * cols, cols, 1});
  }

  absl::StatusOr<const Primitive*> Get(int64_t count, int64_t m, int64_t k, int64_t n, int threads) {
    return cache_.Get(
        std::make_tuple(count, m, k, n), threads,
        [&] {
          Primitive p;
          p.a = Matrices(count, m, k, transpose_a_);
          p.b = Matrices(count, k, n, transpose_b_);
          p.y = Matrices(count, m, n, false);
          p.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.a, p.b, p.y), cpu::CpuEngine()));
          return p;
        },
        what_);
  }

  absl::Status Run(const Primitive& p, const float* a, const float* b, float* y, int threads) {
    const dnnl::engine& engine = cpu::CpuEngine();
    return cpu::RunPrimitive(p.matmul,
                             {{DNNL_ARG_SRC, memory(p.a, engine, const_cast<float*>(a))},
                              {DNNL_ARG_WEIGHTS, memory(p.b, engine, const_cast<float*>(b))},
                              {DNNL_ARG_DST, memory(p.y, engine, y)}},
                             threads, what_);
  }

  const bool batched_;
  const char* const what_;  // for error messages
  bool transpose_a_ = false, transpose_b_ = false;
  cpu::PrimitiveCache<std::tuple<int64_t, int64_t, int64_t, int64_t>, Primitive> cache_;
};

class MatMulKernel : public BatchMatMulKernel {
 public:
  MatMulKernel() : BatchMatMulKernel(/*batched=*/false) {}
};

NEREID_REGISTER_KERNEL("BatchMatMul", kCpu, DT_FLOAT, BatchMatMulKernel);
NEREID_REGISTER_KERNEL("MatMul", kCpu, DT_FLOAT, MatMulKernel);

}  // namespace
}  // namespace nereid
