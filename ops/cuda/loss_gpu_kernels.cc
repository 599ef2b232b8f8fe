// GPU kernels for the class losses and their gradients (softmax
// cross-entropy, multi-class hinge, one-vs-rest logistic): the mean over
// labelled rows, as ops/cpu/loss_kernels.cc computes it (double sums, one
// thread per row for the gradient). A label out of range gives NaN
// (gpu_math.h).

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

using cuda::math::RowLoss;

// Reads the hinge margin (softmax has none) and the ignored label, and the
// checks and geometry both passes share.
class RowLossGpuBase : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    auto margin = attrs.find("margin");
    if (margin != attrs.end()) margin_ = margin->second->f();
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

  float margin_ = 1.0f;
  int64_t ignore_index_ = -100;
};

template <RowLoss kLoss>
class RowLossGpuKernel : public RowLossGpuBase {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& labels = ctx->input(1);
    RETURN_IF_ERROR(CheckLabels(*ctx, labels));
    const auto [rows, k] = RowsOf(ctx->input(0));
    ASSIGN_OR_RETURN(Tensor * loss, ctx->AllocateOutput(0));
    return cuda::Launched(
        cuda::math::MeanRowLoss(kLoss, margin_, ctx->input(0).data<float>(), labels.raw(), labels.dtype() == DT_INT64,
                                rows, k, ignore_index_, loss->data<float>(), stream),
        *ctx);
  }
};

// (logits, labels, dloss) -> dlogits.
template <RowLoss kLoss>
class RowLossGradGpuKernel : public RowLossGpuBase {
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
        cuda::math::MeanRowLossGrad(kLoss, margin_, ctx->input(0).data<float>(), labels.raw(),
                                    labels.dtype() == DT_INT64, rows, k, ignore_index_, ctx->input(2).data<float>(),
                                    static_cast<float*>(labelled.raw()), dlogits->data<float>(), stream),
        *ctx);
  }
};

using SoftmaxCrossEntropyGpuKernel = RowLossGpuKernel<RowLoss::kSoftmaxCrossEntropy>;
using SoftmaxCrossEntropyGradGpuKernel = RowLossGradGpuKernel<RowLoss::kSoftmaxCrossEntropy>;
using HingeLossGpuKernel = RowLossGpuKernel<RowLoss::kHinge>;
using HingeLossGradGpuKernel = RowLossGradGpuKernel<RowLoss::kHinge>;
using LogisticLossGpuKernel = RowLossGpuKernel<RowLoss::kLogistic>;
using LogisticLossGradGpuKernel = RowLossGradGpuKernel<RowLoss::kLogistic>;

NEREID_REGISTER_KERNEL("SoftmaxCrossEntropy", kGpu, DT_FLOAT, SoftmaxCrossEntropyGpuKernel);
NEREID_REGISTER_KERNEL("SoftmaxCrossEntropyGrad", kGpu, DT_FLOAT, SoftmaxCrossEntropyGradGpuKernel);
NEREID_REGISTER_KERNEL("HingeLoss", kGpu, DT_FLOAT, HingeLossGpuKernel);
NEREID_REGISTER_KERNEL("HingeLossGrad", kGpu, DT_FLOAT, HingeLossGradGpuKernel);
NEREID_REGISTER_KERNEL("LogisticLoss", kGpu, DT_FLOAT, LogisticLossGpuKernel);
NEREID_REGISTER_KERNEL("LogisticLossGrad", kGpu, DT_FLOAT, LogisticLossGradGpuKernel);

}  // namespace
}  // namespace nereid
