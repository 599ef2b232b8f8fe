// GPU kernels for the dense layers: MatMul through cuBLAS (fp32, no TF32,
// so results match the host's oneDNN within float rounding), BiasAdd and its
// gradient, ReLU and its gradient.

#include <cublas_v2.h>

#include "absl/strings/str_cat.h"
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

NEREID_REGISTER_KERNEL("MatMul", kGpu, DT_FLOAT, MatMulGpuKernel);
NEREID_REGISTER_KERNEL("BiasAdd", kGpu, DT_FLOAT, BiasAddGpuKernel);
NEREID_REGISTER_KERNEL("BiasAddGrad", kGpu, DT_FLOAT, BiasAddGradGpuKernel);
NEREID_REGISTER_KERNEL("Relu", kGpu, DT_FLOAT, ReluGpuKernel);
NEREID_REGISTER_KERNEL("ReluGrad", kGpu, DT_FLOAT, ReluGradGpuKernel);

}  // namespace
}  // namespace nereid
