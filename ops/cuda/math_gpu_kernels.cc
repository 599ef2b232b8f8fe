// GPU kernels for the dense layers: MatMul through cuBLAS (fp32, no TF32,
// so results match the host's oneDNN within float rounding), BiasAdd and its
// gradient, ReLU and its gradient; and for sums: Add with NumPy
// broadcasting, AddN and ReduceToShapeOf (the project's kernels, adding in
// the CPU's order: the same floats as the host's).

#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/channel_view.h"
#include "ops/cuda/elementwise_kernels.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

// Row-major C[m,n] = op(A)[m,k] op(B)[k,n] is column-major C^T = op(B)^T
// op(A)^T: cuBLAS is handed B first, each matrix as its row-major storage
// read column-major (so a row-major [r,c] matrix has leading dimension c).
class MatMulGpuKernel : public OpKernel {
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
    const int64_t m = ctx->output_dims(0)[0], n = ctx->output_dims(0)[1];
    const int64_t k = transpose_a_ ? a.dim(0) : a.dim(1);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (m == 0 || n == 0) return absl::OkStatus();
    if (k == 0) {
      return cuda::CudaStatus(cudaMemsetAsync(y->raw(), 0, y->num_bytes(), stream), "MatMul: cudaMemsetAsync");
    }
    ASSIGN_OR_RETURN(cuda::Locked<cublasHandle_t> blas, cuda::LockedCublas(stream));
    const float one = 1.0f, zero = 0.0f;
    const int ldb = static_cast<int>(transpose_b_ ? k : n);
    const int lda = static_cast<int>(transpose_a_ ? m : k);
    return cuda::CublasStatus(
        cublasSgemm(blas.handle, transpose_b_ ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a_ ? CUBLAS_OP_T : CUBLAS_OP_N,
                    static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b.data<float>(), ldb,
                    a.data<float>(), lda, &zero, y->data<float>(), static_cast<int>(n)),
        absl::StrCat("MatMul '", ctx->node().name(), "': cublasSgemm"));
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

// `out` and each of `operands` aligned with it at the right; an error
// naming the node unless each operand's dim is out's or 1.
absl::StatusOr<cuda::math::Broadcast> BroadcastOf(const OpKernelContext& ctx, const std::vector<int64_t>& out,
                                                  const std::vector<const std::vector<int64_t>*>& operands) {
  if (out.size() > static_cast<size_t>(cuda::math::kMaxRank)) {
    return absl::UnimplementedError(absl::StrCat(cuda::Prefix(ctx.node()), "[", absl::StrJoin(out, ","),
                                                 "] has more than ", cuda::math::kMaxRank, " dims"));
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
      return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx.node()), "[", absl::StrJoin(dims, ","),
                                                     "] does not broadcast to [", absl::StrJoin(out, ","), "]"));
    }
  }
  return shape;
}

// y = a + b with NumPy broadcasting; operands of y's dims are added as one
// flat vector (no index arithmetic per dim).
class AddGpuKernel : public OpKernel {
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
        cuda::math::BroadcastAdd(a.data<float>(), b.data<float>(), y->data<float>(), n, shape, stream), *ctx);
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

NEREID_REGISTER_KERNEL("MatMul", kGpu, DT_FLOAT, MatMulGpuKernel);
NEREID_REGISTER_KERNEL("BiasAdd", kGpu, DT_FLOAT, BiasAddGpuKernel);
NEREID_REGISTER_KERNEL("BiasAddGrad", kGpu, DT_FLOAT, BiasAddGradGpuKernel);
NEREID_REGISTER_KERNEL("Relu", kGpu, DT_FLOAT, ReluGpuKernel);
NEREID_REGISTER_KERNEL("ReluGrad", kGpu, DT_FLOAT, ReluGradGpuKernel);
NEREID_REGISTER_KERNEL("Add", kGpu, DT_FLOAT, AddGpuKernel);
NEREID_REGISTER_KERNEL("AddN", kGpu, DT_FLOAT, AddNGpuKernel);
NEREID_REGISTER_KERNEL("ReduceToShapeOf", kGpu, DT_FLOAT, ReduceToShapeOfGpuKernel);

}  // namespace
}  // namespace nereid
