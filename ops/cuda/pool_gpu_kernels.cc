// GPU kernels for MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad through
// cuDNN's pooling API (GlobalAvgPool: see below): float32, NCHW, the same
// windows, strides and padding as the CPU kernels (ops/cpu/pool_kernels.cc,
// geometry from ops/cpu/window.cc). Padding is never part of a max, and is
// part of an average's divisor only with count_padding.
//
// cuDNN pads symmetrically. Padding that is not (SAME with an odd total, or
// EXPLICIT with top != bottom or left != right) is split: cuDNN applies the
// smaller side to both sides and the kernel adds the rest by pooling a padded
// copy of x, filled with -inf for max pooling (never the maximum, as cuDNN's
// own padding) and with zeros for an average that counts padding. An average
// that does not count padding cannot be padded so (the zeros would count):
// the kernels refuse it.
//
// AvgPoolGrad gets (x, dy) but cudnnPoolingBackward also wants the forward
// output y: it recomputes it into scratch first.
//
// Max pooling runs as CUDNN_POOLING_MAX_DETERMINISTIC. Its gradient is not
// cuDNN's: the CPU routes each window's dy to the window's first largest x
// (row-major), cuDNN to one maximum its documentation does not name, and
// ties are common (zeros after a ReLU); so MaxPoolGrad runs the project's
// kernel (gpu_math.h), which follows the CPU's rule and order.
//
// GlobalAvgPool and its gradient are the project's kernels too: a thread per
// plane sums it in order, in float, as the CPU's loop does.

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

using cuda::DenseStrides;
using cuda::FitsInt;
using cuda::MakeTensorDesc;
using cuda::PoolDesc;
using cuda::Prefix;
using cuda::TensorDesc;

enum class PoolPass { kForward, kBackward };

class PoolGpuKernel : public OpKernel {
 public:
  PoolGpuKernel(bool max, PoolPass pass) : max_(max), pass_(pass) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    auto list = [&](const char* name, std::vector<int64_t>* out) {
      auto it = attrs.find(name);
      if (it != attrs.end()) out->assign(it->second->list().i().begin(), it->second->list().i().end());
    };
    list("ksize", &ksize_);
    list("strides", &strides_);
    list("pads", &pads_);
    auto padding = attrs.find("padding");
    if (padding != attrs.end()) padding_ = padding->second->s();
    auto count_padding = attrs.find("count_padding");
    if (count_padding != attrs.end()) count_padding_ = count_padding->second->b();
    // Shape inference checked these; the kernel relies on them below.
    if (ksize_.size() != 2 || strides_.size() != 2 || (padding_ == "EXPLICIT" && pads_.size() != 4)) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(node), "malformed ksize, strides or pads attribute"));
    }
    if (padding_ != "VALID" && padding_ != "SAME" && padding_ != "EXPLICIT") {
      return absl::UnimplementedError(absl::StrCat(Prefix(node), "attribute 'padding' ", padding_, " is unknown"));
    }
    return absl::OkStatus();
  }

  // Forward: (x) -> y. Backward: (x, dy) -> dx.
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    const Tensor* dy = pass_ == PoolPass::kForward ? nullptr : &ctx->input(1);
    const std::vector<int64_t>& y_dims = dy == nullptr ? ctx->output_dims(0) : dy->dims();
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    const std::string prefix = Prefix(ctx->node());
    // No windows: no gradient (the CPU's loop leaves dx zero).
    if (dy != nullptr && dy->num_elements() == 0) {
      return cuda::CudaStatus(cudaMemsetAsync(out->raw(), 0, out->num_bytes(), stream),
                              absl::StrCat(prefix, "cudaMemsetAsync"));
    }

    ASSIGN_OR_RETURN(const Plan* plan, GetPlan(prefix, x.dims(), y_dims));
    if (max_ && pass_ == PoolPass::kBackward) {
      // Not cuDNN's: where a window's maximum is tied (common after a ReLU),
      // cuDNN routes the gradient to a maximum it does not document, the
      // CPU to the first in row-major order, as this kernel does.
      const std::vector<int64_t>& xd = x.dims();
      return cuda::Launched(cuda::math::MaxPoolGrad(x.data<float>(), dy->data<float>(), out->data<float>(),
                                                    xd[0] * xd[1], xd[2], xd[3], y_dims[2], y_dims[3], ksize_[0],
                                                    ksize_[1], strides_[0], strides_[1], plan->pad_before[0],
                                                    plan->pad_before[1], stream),
                            *ctx);
    }
    ASSIGN_OR_RETURN(cuda::Locked<cudnnHandle_t> dnn, cuda::LockedCudnn(stream));
    const cudnnHandle_t h = dnn.handle;
    const float one = 1.0f, zero = 0.0f;  // beta 0: cuDNN writes the output without reading it
    // Scratch is stream-ordered: these may be dropped when Compute returns.
    ASSIGN_OR_RETURN(Tensor padded, cuda::Scratch(*ctx, plan->padded_elements * sizeof(float)));
    float* padded_x = padded.data<float>();

    // x as the pooling reads it: x itself, or its padded copy.
    const float* pool_x = x.data<float>();
    if (plan->padded_elements > 0) {
      if (max_) {
        const float lowest = -std::numeric_limits<float>::infinity();
        RETURN_IF_ERROR(cuda::CudnnStatus(cudnnSetTensor(h, plan->x.get(), padded_x, &lowest),
                                          absl::StrCat(prefix, "cudnnSetTensor (-inf padding)")));
      } else {
        RETURN_IF_ERROR(cuda::CudaStatus(cudaMemsetAsync(padded_x, 0, padded.num_bytes(), stream),
                                         absl::StrCat(prefix, "cudaMemsetAsync (zero padding)")));
      }
      RETURN_IF_ERROR(cuda::CudnnStatus(cudnnTransformTensor(h, &one, plan->x_plain.get(), x.data<float>(), &zero,
                                                             plan->x_inner.get(), padded_x + plan->inner_offset),
                                        absl::StrCat(prefix, "cudnnTransformTensor (padding x)")));
      pool_x = padded_x;
    }

    if (pass_ == PoolPass::kForward) {
      return cuda::CudnnStatus(cudnnPoolingForward(h, plan->pool.get(), &one, plan->x.get(), pool_x, &zero,
                                                   plan->y.get(), out->data<float>()),
                               absl::StrCat(prefix, "cudnnPoolingForward"));
    }

    // The forward output, which cudnnPoolingBackward reads (for max pooling,
    // to find each window's maximum).
    ASSIGN_OR_RETURN(Tensor y, cuda::Scratch(*ctx, dy->num_elements() * sizeof(float)));
    RETURN_IF_ERROR(cuda::CudnnStatus(cudnnPoolingForward(h, plan->pool.get(), &one, plan->x.get(), pool_x, &zero,
                                                          plan->y.get(), y.data<float>()),
                                      absl::StrCat(prefix, "cudnnPoolingForward (y for the gradient)")));
    // With a padded copy: the copy's gradient (apart from the copy, which
    // the backward pass reads), whose x part is dx.
    ASSIGN_OR_RETURN(Tensor padded_grad, cuda::Scratch(*ctx, plan->padded_elements * sizeof(float)));
    float* dx = plan->padded_elements > 0 ? padded_grad.data<float>() : out->data<float>();
    RETURN_IF_ERROR(cuda::CudnnStatus(
        cudnnPoolingBackward(h, plan->pool.get(), &one, plan->y.get(), y.data<float>(), plan->y.get(),
                             dy->data<float>(), plan->x.get(), pool_x, &zero, plan->x.get(), dx),
        absl::StrCat(prefix, "cudnnPoolingBackward")));
    if (plan->padded_elements == 0) return absl::OkStatus();
    return cuda::CudnnStatus(cudnnTransformTensor(h, &one, plan->x_inner.get(), dx + plan->inner_offset, &zero,
                                                  plan->x_plain.get(), out->data<float>()),
                             absl::StrCat(prefix, "cudnnTransformTensor (cutting dx out)"));
  }

 private:
  // What one shape needs.
  struct Plan {
    PoolDesc pool;
    TensorDesc x;        // x as the pooling sees it: x, or the padded copy
    TensorDesc x_plain;  // with a padded copy: x itself (dense NCHW)
    TensorDesc x_inner;  // with a padded copy: x's place in it (strided)
    int64_t inner_offset = 0;     // elements from the copy's start to x's first
    int64_t padded_elements = 0;  // the copy's size; 0: no copy
    int64_t pad_before[2] = {0, 0};  // x's padding above and left of it
    TensorDesc y;
  };

  absl::StatusOr<const Plan*> GetPlan(const std::string& prefix, const std::vector<int64_t>& xd,
                                      const std::vector<int64_t>& yd) {
    std::vector<int64_t> key = xd;
    key.insert(key.end(), yd.begin(), yd.end());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, Build(prefix, xd, yd));
    return plans_.emplace(std::move(key), std::move(plan)).first->second.get();
  }

  absl::StatusOr<std::unique_ptr<Plan>> Build(const std::string& prefix, const std::vector<int64_t>& xd,
                                              const std::vector<int64_t>& yd) const {
    if (xd.size() != 4 || yd.size() != 4 || yd[0] != xd[0] || yd[1] != xd[1]) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "x [", absl::StrJoin(xd, ","), "] and y [",
                                                     absl::StrJoin(yd, ","), "] must be NCHW of the same N and C"));
    }
    // The padding applied before and after x on each axis, as
    // ops/cpu/window.cc resolves it, and the output size it implies.
    int64_t before[2], after[2];
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t in = xd[2 + axis], out = yd[2 + axis], k = ksize_[axis], s = strides_[axis];
      int64_t expected;
      if (padding_ == "EXPLICIT") {
        before[axis] = pads_[2 * axis];
        after[axis] = pads_[2 * axis + 1];
        expected = (in + before[axis] + after[axis] - k) / s + 1;
      } else if (padding_ == "SAME") {
        const int64_t total = std::max<int64_t>(0, (out - 1) * s + k - in);
        before[axis] = total / 2;
        after[axis] = total - total / 2;
        expected = (in + s - 1) / s;
      } else {
        before[axis] = after[axis] = 0;
        expected = (in - k) / s + 1;
      }
      if (out != expected || in + before[axis] + after[axis] < k) {
        return absl::InvalidArgumentError(absl::StrCat(prefix, "y [", absl::StrJoin(yd, ","),
                                                       "] is not the pooling's output for x [",
                                                       absl::StrJoin(xd, ","), "]"));
      }
      // A window wholly in the padding has no element to take the maximum
      // or (without count_padding) the mean of; what cuDNN and oneDNN give
      // there is not documented to agree. Windows start in order, so the
      // first and the last tell.
      if (before[axis] >= k || (out - 1) * s - before[axis] >= in) {
        return absl::UnimplementedError(absl::StrCat(
            prefix, "a ", k, "-wide window lies wholly in the padding of x [", absl::StrJoin(xd, ","),
            "] (attributes 'padding' ", padding_, ", 'pads' [", absl::StrJoin(pads_, ","), "], 'ksize' [",
            absl::StrJoin(ksize_, ","), "], 'strides' [", absl::StrJoin(strides_, ","), "]); the GPU kernel cannot "
            "promise the CPU's result there"));
      }
    }
    // cuDNN pads both sides by the smaller pad; the rest goes into the copy.
    const int64_t sym_h = std::min(before[0], after[0]), sym_w = std::min(before[1], after[1]);
    const int64_t pad_top = before[0] - sym_h, pad_left = before[1] - sym_w;
    const std::array<int64_t, 4> x_dims = {xd[0], xd[1], xd[2], xd[3]};
    const std::array<int64_t, 4> pool_x_dims = {xd[0], xd[1], xd[2] + pad_top + after[0] - sym_h,
                                                xd[3] + pad_left + after[1] - sym_w};
    const bool padded = pool_x_dims != x_dims;
    if (padded && !max_ && !count_padding_) {
      return absl::UnimplementedError(absl::StrCat(
          prefix, "asymmetric padding (top ", before[0], ", bottom ", after[0], ", left ", before[1], ", right ",
          after[1], " from attribute 'padding' ", padding_,
          ") with attribute 'count_padding' false: cuDNN pads symmetrically, and padding x itself would put the "
          "padding into the divisor"));
    }
    const std::array<int64_t, 4> pool_x_strides = DenseStrides(pool_x_dims);
    const std::array<int64_t, 4> y_dims = {yd[0], yd[1], yd[2], yd[3]};
    if (!FitsInt({pool_x_dims[0], pool_x_dims[1], pool_x_dims[2], pool_x_dims[3], pool_x_strides[0],
                  xd[1] * xd[2] * xd[3], yd[1] * yd[2] * yd[3], ksize_[0], ksize_[1], strides_[0], strides_[1]})) {
      return absl::UnimplementedError(absl::StrCat(prefix, "x [", absl::StrJoin(xd, ","),
                                                   "] or the window attributes exceed cuDNN's int sizes"));
    }

    auto plan = std::make_unique<Plan>();
    plan->pad_before[0] = before[0];
    plan->pad_before[1] = before[1];
    RETURN_IF_ERROR(MakeTensorDesc(&plan->x, pool_x_dims, pool_x_strides, prefix));
    if (padded) {
      plan->padded_elements = pool_x_dims[0] * pool_x_strides[0];
      plan->inner_offset = pad_top * pool_x_dims[3] + pad_left;
      RETURN_IF_ERROR(MakeTensorDesc(&plan->x_plain, x_dims, DenseStrides(x_dims), prefix));
      RETURN_IF_ERROR(MakeTensorDesc(&plan->x_inner, x_dims, pool_x_strides, prefix));
    }
    RETURN_IF_ERROR(MakeTensorDesc(&plan->y, y_dims, DenseStrides(y_dims), prefix));
    RETURN_IF_ERROR(cuda::CudnnStatus(cudnnCreatePoolingDescriptor(plan->pool.out()),
                                      absl::StrCat(prefix, "cudnnCreatePoolingDescriptor")));
    const cudnnPoolingMode_t mode = max_             ? CUDNN_POOLING_MAX_DETERMINISTIC
                                    : count_padding_ ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                     : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    RETURN_IF_ERROR(cuda::CudnnStatus(
        cudnnSetPooling2dDescriptor(plan->pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(ksize_[0]),
                                    static_cast<int>(ksize_[1]), static_cast<int>(sym_h), static_cast<int>(sym_w),
                                    static_cast<int>(strides_[0]), static_cast<int>(strides_[1])),
        absl::StrCat(prefix, "cudnnSetPooling2dDescriptor")));
    // cuDNN's own view of the output must be y's dims, or the padding split
    // above is wrong.
    int n = 0, c = 0, oh = 0, ow = 0;
    RETURN_IF_ERROR(
        cuda::CudnnStatus(cudnnGetPooling2dForwardOutputDim(plan->pool.get(), plan->x.get(), &n, &c, &oh, &ow),
                          absl::StrCat(prefix, "cudnnGetPooling2dForwardOutputDim")));
    if (n != yd[0] || c != yd[1] || oh != yd[2] || ow != yd[3]) {
      return absl::InternalError(absl::StrCat(prefix, "cuDNN's output [", n, ",", c, ",", oh, ",", ow,
                                              "] is not y [", absl::StrJoin(yd, ","), "]"));
    }
    return plan;
  }

  const bool max_;  // else average
  const PoolPass pass_;
  std::vector<int64_t> ksize_;
  std::vector<int64_t> strides_{1, 1};
  std::string padding_ = "VALID";
  std::vector<int64_t> pads_;  // top, bottom, left, right (EXPLICIT)
  bool count_padding_ = false;

  std::mutex mu_;  // guards plans_ (Compute runs concurrently for different steps)
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;  // by x and y dims
};

class MaxPoolGpuKernel : public PoolGpuKernel {
 public:
  MaxPoolGpuKernel() : PoolGpuKernel(true, PoolPass::kForward) {}
};
class MaxPoolGradGpuKernel : public PoolGpuKernel {
 public:
  MaxPoolGradGpuKernel() : PoolGpuKernel(true, PoolPass::kBackward) {}
};
class AvgPoolGpuKernel : public PoolGpuKernel {
 public:
  AvgPoolGpuKernel() : PoolGpuKernel(false, PoolPass::kForward) {}
};
class AvgPoolGradGpuKernel : public PoolGpuKernel {
 public:
  AvgPoolGradGpuKernel() : PoolGpuKernel(false, PoolPass::kBackward) {}
};

// Forward: (x [N,C,H,W]) -> y [N,C]. Backward: (x, dy [N,C]) -> dx, dy / (H*W)
// over each plane.
class GlobalAvgPoolGpuKernel : public OpKernel {
 public:
  explicit GlobalAvgPoolGpuKernel(PoolPass pass = PoolPass::kForward) : pass_(pass) {}

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    if (x.rank() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx->node()), "x must be NCHW, got ", x.DebugString()));
    }
    if (pass_ == PoolPass::kBackward && ctx->input(1).dims() != std::vector<int64_t>{x.dim(0), x.dim(1)}) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(ctx->node()), "dy ", ctx->input(1).DebugString(),
                                                     " is not [N,C] of x ", x.DebugString()));
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    const int64_t planes = x.dim(0) * x.dim(1), area = x.dim(2) * x.dim(3);
    // As the CPU: a plane of no elements averages to 0.
    const float scale = area > 0 ? 1.0f / static_cast<float>(area) : 0.0f;
    return cuda::Launched(
        pass_ == PoolPass::kForward
            ? cuda::math::GlobalAvgPool(x.data<float>(), out->data<float>(), planes, area, scale, stream)
            : cuda::math::GlobalAvgPoolGrad(ctx->input(1).data<float>(), out->data<float>(), planes, area, scale,
                                            stream),
        *ctx);
  }

 private:
  const PoolPass pass_;
};

class GlobalAvgPoolGradGpuKernel : public GlobalAvgPoolGpuKernel {
 public:
  GlobalAvgPoolGradGpuKernel() : GlobalAvgPoolGpuKernel(PoolPass::kBackward) {}
};

NEREID_REGISTER_KERNEL("MaxPool", kGpu, DT_FLOAT, MaxPoolGpuKernel);
NEREID_REGISTER_KERNEL("MaxPoolGrad", kGpu, DT_FLOAT, MaxPoolGradGpuKernel);
NEREID_REGISTER_KERNEL("AvgPool", kGpu, DT_FLOAT, AvgPoolGpuKernel);
NEREID_REGISTER_KERNEL("AvgPoolGrad", kGpu, DT_FLOAT, AvgPoolGradGpuKernel);
NEREID_REGISTER_KERNEL("GlobalAvgPool", kGpu, DT_FLOAT, GlobalAvgPoolGpuKernel);
NEREID_REGISTER_KERNEL("GlobalAvgPoolGrad", kGpu, DT_FLOAT, GlobalAvgPoolGradGpuKernel);

}  // namespace
}  // namespace nereid
