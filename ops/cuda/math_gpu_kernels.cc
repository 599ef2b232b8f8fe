// GPU kernels for the dense layers: MatMul and BatchMatMul through cuBLAS
// (fp32, CUBLAS_DEFAULT_MATH: no TF32, so results match the host's oneDNN
// within float rounding), BiasAdd and its gradient, ReLU, GELU and softmax
// and their gradients; and for elementwise sums and products: Add and Mul
// with NumPy broadcasting, AddN and ReduceToShapeOf (the project's kernels,
// adding in the CPU's order: the same floats as the host's).

#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/channel_view.h"
#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/elementwise_kernels.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

using cuda::Prefix;

// `out` and each of `operands` aligned with it at the right; an error
// naming the node unless each operand's dim is out's or 1.
absl::StatusOr<cuda::math::Broadcast> BroadcastOf(const OpKernelContext& ctx, const std::vector<int64_t>& out,
                                                  const std::vector<const std::vector<int64_t>*>& operands) {
  if (out.size() > static_cast<size_t>(cuda::math::kMaxRank)) {
    return absl::UnimplementedError(absl::StrCat(Prefix(ctx.node()), "[", absl::StrJoin(out, ","), "] has more than ",
                                                 cuda::math::kMaxRank, " dims"));
  }
  cuda::math::Broadcast shape;
  shape.rank = static_cast<int>(out.size());
  for (size_t k = 0; k < operands.size(); ++k) {
    const std::vector<int64_t>& dims = *operands[k];
    const size_t lead = out.size() - std::min(dims.size(), out.size());
    bool fits = dims.size() <= out.size();
    for (size_t d = 0; d < out.size(); ++d) {
      shape.out[d] = out[d];
      shape.in[k][d] = d < lead ? 1 : dims[d - lead];
      fits = fits && (shape.in[k][d] == out[d] || shape.in[k][d] == 1);
    }
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx.node()), "[", absl::StrJoin(dims, ","),
                                                     "] does not broadcast to [", absl::StrJoin(out, ","), "]"));
    }
  }
  return shape;
}

// Where output element t of `shape.out` reads operand k: its offset in
// operand k's elements (its broadcast dims left out).
int64_t OffsetIn(const cuda::math::Broadcast& shape, int k, int64_t t) {
  int64_t rest = t, at = 0, stride = 1;
  for (int d = shape.rank - 1; d >= 0; --d) {
    const int64_t coord = rest % shape.out[d];
    rest /= shape.out[d];
    if (shape.in[k][d] != 1) at += coord * stride;
    stride *= shape.in[k][d];
  }
  return at;
}

// The product of dims[begin, end).
int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// Row-major y[m,n] = op(a)[m,k] op(b)[k,n] is column-major y^T = op(b)^T
// op(a)^T: cuBLAS is handed b first, each matrix as its row-major storage
// read column-major (so a row-major [r,c] matrix has leading dimension c).
struct Gemm {
  bool ta, tb;
  int m, n, k;
};

// `count` such products, a, b and y `stride_*` floats apart from one
// product to the next (0: the same matrix for every product).
cublasStatus_t RunGemm(cublasHandle_t handle, const Gemm& g, const float* a, int64_t stride_a, const float* b,
                       int64_t stride_b, float* y, int count) {
  const float one = 1.0f, zero = 0.0f;
  const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
  if (count == 1) return cublasSgemm(handle, op_b, op_a, g.n, g.m, g.k, &one, b, ldb, a, lda, &zero, y, g.n);
  return cublasSgemmStridedBatched(handle, op_b, op_a, g.n, g.m, g.k, &one, b, ldb, stride_b, a, lda, stride_a, &zero,
                                   y, g.n, static_cast<int64_t>(g.m) * g.n, count);
}

// MatMul (no batch dims) and BatchMatMul: a [..., m, k] (or [..., k, m]
// transposed) times b [..., k, n] (or [..., n, k]), the batch dims
// broadcast. As on the host, three shapes of work: one right-hand matrix
// (not transposed on the left) folds the left batch into the rows, one
// SGEMM; batches that are each whole or a single matrix are one strided
// batched SGEMM (stride 0 for the single one); batches broadcast both ways
// are an SGEMM per output matrix.
class BatchMatMulGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    transpose_a_ = attrs.at("transpose_a")->b();
    transpose_b_ = attrs.at("transpose_b")->b();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    const std::vector<int64_t>& dims = ctx->output_dims(0);
    if (a.rank() < 2 || b.rank() < 2 || dims.size() < 2 ||
        a.dim(a.rank() - (transpose_a_ ? 2 : 1)) != b.dim(b.rank() - (transpose_b_ ? 1 : 2)) ||
        a.dim(a.rank() - (transpose_a_ ? 1 : 2)) != dims[dims.size() - 2] ||
        b.dim(b.rank() - (transpose_b_ ? 2 : 1)) != dims.back()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Prefix(ctx->node()), a.DebugString(), transpose_a_ ? " (transposed)" : "", " times ", b.DebugString(),
          transpose_b_ ? " (transposed)" : "", " is not [", absl::StrJoin(dims, ","), "]"));
    }
    const std::vector<int64_t> batch(dims.begin(), dims.end() - 2), batch_a(a.dims().begin(), a.dims().end() - 2),
        batch_b(b.dims().begin(), b.dims().end() - 2);
    ASSIGN_OR_RETURN(cuda::math::Broadcast shape, BroadcastOf(*ctx, batch, {&batch_a, &batch_b}));
    const int64_t m = dims[dims.size() - 2], n = dims.back(), k = a.dim(a.rank() - (transpose_a_ ? 2 : 1));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (k == 0) {
      return cuda::CudaStatus(cudaMemsetAsync(y->raw(), 0, y->num_bytes(), stream),
                              absl::StrCat(Prefix(ctx->node()), "cudaMemsetAsync"));
    }
    const int64_t count = Product(batch, 0, batch.size()), count_a = Product(batch_a, 0, batch_a.size()),
                  count_b = Product(batch_b, 0, batch_b.size());
    if (!cuda::FitsInt({count * m, n, k, count})) {
      return absl::UnimplementedError(absl::StrCat(Prefix(ctx->node()), a.DebugString(), " times ", b.DebugString(),
                                                   " exceeds cuBLAS's int sizes"));
    }
    ASSIGN_OR_RETURN(cuda::Locked<cublasHandle_t> blas, cuda::LockedCublas(stream));
    Gemm g{transpose_a_, transpose_b_, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k)};
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* py = y->data<float>();
    const std::string what = absl::StrCat(Prefix(ctx->node()), "cuBLAS SGEMM");
    if (count_b == 1 && count_a == count && !transpose_a_) {
      g.m = static_cast<int>(count * m);
      return cuda::CublasStatus(RunGemm(blas.handle, g, pa, 0, pb, 0, py, 1), what);
    }
    if ((count_a == count || count_a == 1) && (count_b == count || count_b == 1)) {
      return cuda::CublasStatus(RunGemm(blas.handle, g, pa, count_a == 1 ? 0 : m * k, pb, count_b == 1 ? 0 : k * n, py,
                                        static_cast<int>(count)),
                                what);
    }
    for (int64_t t = 0; t < count; ++t) {
      RETURN_IF_ERROR(cuda::CublasStatus(RunGemm(blas.handle, g, pa + OffsetIn(shape, 0, t) * m * k, 0,
                                                 pb + OffsetIn(shape, 1, t) * k * n, 0, py + t * m * n, 1),
                                         what));
    }
    return absl::OkStatus();
  }

 private:
  bool transpose_a_ = false, transpose_b_ = false;
};

class BiasAddGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (y->num_elements() == 0) return absl::OkStatus();
    const ChannelView v = ChannelViewOf(ctx->input(0));
    return cuda::Launched(cuda::math::BiasAdd(ctx->input(0).data<float>(), ctx->input(1).data<float>(),
                                              y->data<float>(), v.outer, v.channels, v.inner, stream),
                          *ctx);
  }
};

class BiasAddGradGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * db, ctx->AllocateOutput(0));
    if (db->num_elements() == 0) return absl::OkStatus();
    const ChannelView v = ChannelViewOf(ctx->input(0));
    return cuda::Launched(
        cuda::math::BiasAddGrad(ctx->input(0).data<float>(), db->data<float>(), v.outer, v.channels, v.inner, stream),
        *ctx);
  }
};

class ReluGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    return cuda::ReluForward(ctx->input(0).data<float>(), y->data<float>(), y->num_elements(), stream);
  }
};

// (dy, y) -> dy where y > 0.
class ReluGradGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    return cuda::ReluBackward(ctx->input(0).data<float>(), ctx->input(1).data<float>(), dx->data<float>(),
                              dx->num_elements(), stream);
  }
};

// Output 0 of an op whose output has its input's shape; a gradient's two
// inputs (dy and x, or dy and y) must have the same.
absl::StatusOr<Tensor*> AllocateLikeInput(OpKernelContext& ctx, bool backward) {
  if (backward && ctx.input(0).dims() != ctx.input(1).dims()) {
    return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx.node()), "dy ", ctx.input(0).DebugString(), " and ",
                                                   ctx.input(1).DebugString(), " differ"));
  }
  return ctx.AllocateOutput(0);
}

// Gelu (x -> y) and GeluGrad ((dy, x) -> dx), in the form the attribute
// `approximate` names: "none" (erf) or "tanh".
class GeluGpuKernel : public OpKernel {
 public:
  explicit GeluGpuKernel(bool backward = false) : backward_(backward) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    tanh_form_ = attrs.at("approximate")->s() == "tanh";
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * out, AllocateLikeInput(*ctx, backward_));
    const int64_t n = out->num_elements();
    if (n == 0) return absl::OkStatus();
    const float* first = ctx->input(0).data<float>();
    return cuda::Launched(
        backward_ ? cuda::math::GeluGrad(first, ctx->input(1).data<float>(), out->data<float>(), n, tanh_form_, stream)
                  : cuda::math::Gelu(first, out->data<float>(), n, tanh_form_, stream),
        *ctx);
  }

 private:
  bool backward_;
  bool tanh_form_ = false;
};

class GeluGradGpuKernel : public GeluGpuKernel {
 public:
  GeluGradGpuKernel() : GeluGpuKernel(/*backward=*/true) {}
};

// Softmax (x -> y) and SoftmaxGrad ((dy, y) -> dx) along `axis`.
class SoftmaxGpuKernel : public OpKernel {
 public:
  explicit SoftmaxGpuKernel(bool backward = false) : backward_(backward) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const std::vector<int64_t>& dims = ctx->input(0).dims();
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(ctx->node()), "axis ", axis_, " is outside ", ctx->input(0).DebugString()));
    }
    ASSIGN_OR_RETURN(Tensor * out, AllocateLikeInput(*ctx, backward_));
    if (out->num_elements() == 0) return absl::OkStatus();
    const cuda::math::Lines lines{Product(dims, 0, axis), dims[axis], Product(dims, axis + 1, dims.size())};
    const float* first = ctx->input(0).data<float>();
    return cuda::Launched(
        backward_ ? cuda::math::SoftmaxGrad(first, ctx->input(1).data<float>(), out->data<float>(), lines, stream)
                  : cuda::math::Softmax(first, out->data<float>(), lines, stream),
        *ctx);
  }

 private:
  bool backward_;
  int64_t axis_ = -1;
};

class SoftmaxGradGpuKernel : public SoftmaxGpuKernel {
 public:
  SoftmaxGradGpuKernel() : SoftmaxGpuKernel(/*backward=*/true) {}
};

// y = a + b, a - b, a * b or a / b with NumPy broadcasting; operands of y's dims are
// combined as one flat vector (no index arithmetic per dim).
template <cuda::math::BinaryOp kOp>
class BinaryGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const int64_t n = y->num_elements();
    if (n == 0) return absl::OkStatus();
    const std::vector<int64_t> flat = {n};
    const bool same = a.dims() == y->dims() && b.dims() == y->dims();
    ASSIGN_OR_RETURN(cuda::math::Broadcast shape, same ? BroadcastOf(*ctx, flat, {&flat, &flat})
                                                       : BroadcastOf(*ctx, y->dims(), {&a.dims(), &b.dims()}));
    return cuda::Launched(
        cuda::math::BroadcastBinary(kOp, a.data<float>(), b.data<float>(), y->data<float>(), n, shape, stream), *ctx);
  }
};

// (inputs...) -> their sum, added in input order.
class AddNGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    std::vector<const float*> inputs;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      if (ctx->input(i).dims() != ctx->input(0).dims()) {
        return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx->node()), "input ", i, " is ",
                                                       ctx->input(i).DebugString(), " but input 0 is ",
                                                       ctx->input(0).DebugString()));
      }
      inputs.push_back(ctx->input(i).data<float>());
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (inputs.size() == 1) {
      return cuda::CopyOnStream(y->raw(), inputs[0], y->num_bytes(), stream, cuda::Prefix(ctx->node()));
    }
    return cuda::Launched(
        cuda::math::AddN(inputs.data(), static_cast<int>(inputs.size()), y->data<float>(), y->num_elements(), stream),
        *ctx);
  }
};

// (dy, x) -> dy summed down to x's shape; a copy of dy when nothing was
// broadcast.
class ReduceToShapeOfGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& dy = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    if (dy.dims() == dx->dims())
      return cuda::CopyOnStream(dx->raw(), dy.raw(), dy.num_bytes(), stream, cuda::Prefix(ctx->node()));
    ASSIGN_OR_RETURN(cuda::math::Broadcast shape, BroadcastOf(*ctx, dy.dims(), {&dx->dims()}));
    if (dx->num_elements() == 0) return absl::OkStatus();
    // A sum over nothing.
    if (dy.num_elements() == 0) {
      return cuda::Launched(cuda::math::Fill(dx->data<float>(), 0.0f, dx->num_elements(), stream), *ctx);
    }
    return cuda::Launched(
        cuda::math::ReduceToShape(dy.data<float>(), dx->data<float>(), dx->num_elements(), shape, stream), *ctx);
  }
};

using AddGpuKernel = BinaryGpuKernel<cuda::math::BinaryOp::kAdd>;
using SubGpuKernel = BinaryGpuKernel<cuda::math::BinaryOp::kSub>;
using MulGpuKernel = BinaryGpuKernel<cuda::math::BinaryOp::kMul>;
using DivGpuKernel = BinaryGpuKernel<cuda::math::BinaryOp::kDiv>;

NEREID_REGISTER_KERNEL("MatMul", kGpu, DT_FLOAT, BatchMatMulGpuKernel);
NEREID_REGISTER_KERNEL("BatchMatMul", kGpu, DT_FLOAT, BatchMatMulGpuKernel);
NEREID_REGISTER_KERNEL("BiasAdd", kGpu, DT_FLOAT, BiasAddGpuKernel);
NEREID_REGISTER_KERNEL("BiasAddGrad", kGpu, DT_FLOAT, BiasAddGradGpuKernel);
NEREID_REGISTER_KERNEL("Relu", kGpu, DT_FLOAT, ReluGpuKernel);
NEREID_REGISTER_KERNEL("ReluGrad", kGpu, DT_FLOAT, ReluGradGpuKernel);
NEREID_REGISTER_KERNEL("Gelu", kGpu, DT_FLOAT, GeluGpuKernel);
NEREID_REGISTER_KERNEL("GeluGrad", kGpu, DT_FLOAT, GeluGradGpuKernel);
NEREID_REGISTER_KERNEL("Softmax", kGpu, DT_FLOAT, SoftmaxGpuKernel);
NEREID_REGISTER_KERNEL("SoftmaxGrad", kGpu, DT_FLOAT, SoftmaxGradGpuKernel);
NEREID_REGISTER_KERNEL("Add", kGpu, DT_FLOAT, AddGpuKernel);
NEREID_REGISTER_KERNEL("Sub", kGpu, DT_FLOAT, SubGpuKernel);
NEREID_REGISTER_KERNEL("Mul", kGpu, DT_FLOAT, MulGpuKernel);
NEREID_REGISTER_KERNEL("Div", kGpu, DT_FLOAT, DivGpuKernel);
NEREID_REGISTER_KERNEL("AddN", kGpu, DT_FLOAT, AddNGpuKernel);
NEREID_REGISTER_KERNEL("ReduceToShapeOf", kGpu, DT_FLOAT, ReduceToShapeOfGpuKernel);

}  // namespace
}  // namespace nereid
