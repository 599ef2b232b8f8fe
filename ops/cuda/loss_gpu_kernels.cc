// GPU kernels for the softmax cross-entropy loss and its gradient: the mean
// over labelled rows, as ops/cpu/loss_kernels.cc computes it (double sums,
// one thread per row). A label out of range gives NaN (gpu_math.h).

#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

class SoftmaxCrossEntropyGpuBase : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    auto ignore = attrs.find("ignore_index");
    if (ignore != attrs.end()) ignore_index_ = ignore->second->i();
    return absl::OkStatus();
  }

 protected:
  // Rows (every position but the last) and classes of the logits.
  static std::pair<int64_t, int64_t> RowsOf(const Tensor& logits) {
    const int64_t k = logits.dim(logits.rank() - 1);
    return {k == 0 ? 0 : logits.num_elements() / k, k};
  }
  static absl::Status CheckLabels(const OpKernelContext& ctx, const Tensor& labels) {
    if (labels.dtype() != DT_INT32 && labels.dtype() != DT_INT64) {
      return absl::InvalidArgumentError(absl::StrCat("labels of '", ctx.node().name(), "' are ", labels.DebugString(),
                                                     "; int32 or int64 labels are expected"));
    }
    return absl::OkStatus();
  }

  int64_t ignore_index_ = -100;
};

class SoftmaxCrossEntropyGpuKernel : public SoftmaxCrossEntropyGpuBase {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& labels = ctx->input(1);
    RETURN_IF_ERROR(CheckLabels(*ctx, labels));
    const auto [rows, k] = RowsOf(ctx->input(0));
    ASSIGN_OR_RETURN(Tensor * loss, ctx->AllocateOutput(0));
    return cuda::Launched(cuda::math::SoftmaxCrossEntropy(ctx->input(0).data<float>(), labels.raw(),
                                                          labels.dtype() == DT_INT64, rows, k, ignore_index_,
                                                          loss->data<float>(), stream),
                          *ctx);
  }
};

// (logits, labels, dloss) -> dlogits.
class SoftmaxCrossEntropyGradGpuKernel : public SoftmaxCrossEntropyGpuBase {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& labels = ctx->input(1);
    RETURN_IF_ERROR(CheckLabels(*ctx, labels));
    const auto [rows, k] = RowsOf(ctx->input(0));
    ASSIGN_OR_RETURN(Tensor * dlogits, ctx->AllocateOutput(0));
    if (rows == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(Tensor labelled, cuda::Scratch(*ctx, sizeof(float)));
    return cuda::Launched(
        cuda::math::SoftmaxCrossEntropyGrad(ctx->input(0).data<float>(), labels.raw(), labels.dtype() == DT_INT64,
                                            rows, k, ignore_index_, ctx->input(2).data<float>(),
                                            static_cast<float*>(labelled.raw()), dlogits->data<float>(), stream),
        *ctx);
  }
};

NEREID_REGISTER_KERNEL("SoftmaxCrossEntropy", kGpu, DT_FLOAT, SoftmaxCrossEntropyGpuKernel);
NEREID_REGISTER_KERNEL("SoftmaxCrossEntropyGrad", kGpu, DT_FLOAT, SoftmaxCrossEntropyGradGpuKernel);

}  // namespace
}  // namespace nereid
