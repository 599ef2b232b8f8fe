// GPU kernels for Conv2D and its two gradients (Conv2DBackpropInput,
// Conv2DBackpropFilter) through cuDNN's convolution API: float32, NCHW
// activations, OIHW filters ((O, C/groups, KH, KW) when grouped), the same
// cross-correlation, strides, dilations, groups and padding as the CPU
// kernels (ops/cpu/conv_kernels.cc, geometry from ops/cpu/window.cc).
//
// cuDNN pads symmetrically. Padding that is not (SAME with an odd total, or
// EXPLICIT with top != bottom or left != right) is split: cuDNN applies the
// smaller side to both sides and the kernel adds the rest by running on a
// zero-padded copy of x (for the data gradient: computing the padded copy's
// gradient and cutting x's part out of it).
//
// Math is CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores
// for float data on Ampere and later, whose 10-bit mantissa would not match
// the host's float32 results.

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
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

namespace nereid {
namespace {

using cuda::ConvDesc;
using cuda::DenseStrides;
using cuda::FilterDesc;
using cuda::FitsInt;
using cuda::MakeTensorDesc;
using cuda::Prefix;
using cuda::TensorDesc;

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// Algorithms that compute the convolution as sums of products (GEMM-like,
// direct), not through a transform (FFT, Winograd) whose rounding is
// visibly larger than the host's.
bool SumsOfProducts(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool SumsOfProducts(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool SumsOfProducts(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The first algorithm cuDNN's heuristics rank that runs without tensor-op
// (TF32) math, preferring, in this order: deterministic sums of products,
// any sum of products, any deterministic one, any. The CPU kernels are bit
// for bit repeatable, and so are these then (the data and filter gradients
// have algorithms that sum with atomics).
template <typename Perf>
absl::StatusOr<Perf> PickAlgorithm(const Perf* results, int count, const std::string& what) {
  const Perf* best = nullptr;
  int best_rank = 4;
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[i];
    if (r.status != CUDNN_STATUS_SUCCESS || r.mathType == CUDNN_TENSOR_OP_MATH ||
        r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
      continue;
    }
    const bool deterministic = r.determinism == CUDNN_DETERMINISTIC;
    const int rank = SumsOfProducts(r.algo) ? (deterministic ? 0 : 1) : (deterministic ? 2 : 3);
    if (rank < best_rank) {
      best = &r;
      best_rank = rank;
    }
  }
  if (best != nullptr) return *best;
  return absl::UnimplementedError(
      absl::StrCat(what, ": cuDNN offers no float32 (non-tensor-op) algorithm among ", count, " results"));
}

class ConvGpuKernel : public OpKernel {
 public:
  explicit ConvGpuKernel(ConvPass pass) : pass_(pass) {}

  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    auto list = [&](const char* name, std::vector<int64_t>* out) {
      auto it = attrs.find(name);
      if (it != attrs.end()) out->assign(it->second->list().i().begin(), it->second->list().i().end());
    };
    list("strides", &strides_);
    list("dilations", &dilations_);
    list("pads", &pads_);
    auto padding = attrs.find("padding");
    if (padding != attrs.end()) padding_ = padding->second->s();
    auto groups = attrs.find("groups");
    if (groups != attrs.end()) groups_ = groups->second->i();
    // Shape inference checked these; the kernel relies on them below.
    if (strides_.size() != 2 || dilations_.size() != 2 || (padding_ == "EXPLICIT" && pads_.size() != 4) ||
        groups_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(node), "malformed strides, dilations, pads or groups attribute"));
    }
    if (padding_ != "VALID" && padding_ != "SAME" && padding_ != "EXPLICIT") {
      return absl::UnimplementedError(absl::StrCat(Prefix(node), "attribute 'padding' ", padding_, " is unknown"));
    }
    return absl::OkStatus();
  }

  // Inputs: forward (x, filter); backward (x, filter, dy), where the data
  // gradient reads x for its dims only.
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    const Tensor& f = ctx->input(1);
    const Tensor* dy = pass_ == ConvPass::kForward ? nullptr : &ctx->input(2);
    const std::vector<int64_t>& y_dims = dy == nullptr ? ctx->output_dims(0) : dy->dims();
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    if (out->num_elements() == 0) return absl::OkStatus();
    const std::string prefix = Prefix(ctx->node());
    // A sum over nothing (an empty batch, no channels): zeros, which cuDNN
    // (refusing zero dims) would not give.
    const bool empty_sum = pass_ == ConvPass::kForward        ? x.num_elements() == 0 || f.num_elements() == 0
                           : pass_ == ConvPass::kBackwardData ? f.num_elements() == 0 || dy->num_elements() == 0
                                                              : x.num_elements() == 0 || dy->num_elements() == 0;
    if (empty_sum) {
      return cuda::CudaStatus(cudaMemsetAsync(out->raw(), 0, out->num_bytes(), stream),
                              absl::StrCat(prefix, "cudaMemsetAsync"));
    }

    ASSIGN_OR_RETURN(cuda::Locked<cudnnHandle_t> dnn, cuda::LockedCudnn(stream));
    ASSIGN_OR_RETURN(const Plan* plan, GetPlan(dnn.handle, prefix, x.dims(), f.dims(), y_dims));
    // Scratch is stream-ordered: these may be dropped when Compute returns.
    ASSIGN_OR_RETURN(Tensor workspace, cuda::Scratch(*ctx, plan->workspace_bytes));
    ASSIGN_OR_RETURN(Tensor padded, cuda::Scratch(*ctx, plan->padded_elements * sizeof(float)));
    const float one = 1.0f, zero = 0.0f;  // beta 0: cuDNN writes the output without reading it
    float* padded_x = padded.data<float>();
    const cudnnHandle_t h = dnn.handle;

    // x as the convolution reads it: x itself, or its zero-padded copy.
    const float* conv_x = x.data<float>();
    if (pass_ != ConvPass::kBackwardData && plan->padded_elements > 0) {
      RETURN_IF_ERROR(cuda::CudaStatus(cudaMemsetAsync(padded_x, 0, padded.num_bytes(), stream),
                                       absl::StrCat(prefix, "cudaMemsetAsync")));
      RETURN_IF_ERROR(cuda::CudnnStatus(cudnnTransformTensor(h, &one, plan->x_plain.get(), x.data<float>(), &zero,
                                                             plan->x_inner.get(), padded_x + plan->inner_offset),
                                        absl::StrCat(prefix, "cudnnTransformTensor (padding x)")));
      conv_x = padded_x;
    }

    switch (pass_) {
      case ConvPass::kForward:
        return cuda::CudnnStatus(
            cudnnConvolutionForward(h, &one, plan->x.get(), conv_x, plan->f.get(), f.data<float>(), plan->conv.get(),
                                    static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo), workspace.raw(),
                                    plan->workspace_bytes, &zero, plan->y.get(), out->data<float>()),
            absl::StrCat(prefix, "cudnnConvolutionForward"));
      case ConvPass::kBackwardData: {
        // The gradient of the padded copy, whose x part is dx.
        float* dx = plan->padded_elements > 0 ? padded_x : out->data<float>();
        RETURN_IF_ERROR(cuda::CudnnStatus(
            cudnnConvolutionBackwardData(h, &one, plan->f.get(), f.data<float>(), plan->y.get(), dy->data<float>(),
                                         plan->conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo),
                                         workspace.raw(), plan->workspace_bytes, &zero, plan->x.get(), dx),
            absl::StrCat(prefix, "cudnnConvolutionBackwardData")));
        if (plan->padded_elements == 0) return absl::OkStatus();
        return cuda::CudnnStatus(cudnnTransformTensor(h, &one, plan->x_inner.get(), padded_x + plan->inner_offset,
                                                      &zero, plan->x_plain.get(), out->data<float>()),
                                 absl::StrCat(prefix, "cudnnTransformTensor (cutting dx out)"));
      }
      case ConvPass::kBackwardFilter:
        return cuda::CudnnStatus(
            cudnnConvolutionBackwardFilter(h, &one, plan->x.get(), conv_x, plan->y.get(), dy->data<float>(),
                                           plan->conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo),
                                           workspace.raw(), plan->workspace_bytes, &zero, plan->f.get(),
                                           out->data<float>()),
            absl::StrCat(prefix, "cudnnConvolutionBackwardFilter"));
    }
    return absl::InternalError(absl::StrCat(prefix, "unknown convolution pass"));
  }

 private:
  // What one shape needs: descriptors, the algorithm and its workspace.
  struct Plan {
    TensorDesc x;        // x as the convolution sees it: x, or the padded copy
    TensorDesc x_plain;  // with a padded copy: x itself (dense NCHW)
    TensorDesc x_inner;  // with a padded copy: x's place in it (strided)
    int64_t inner_offset = 0;     // elements from the copy's start to x's first
    int64_t padded_elements = 0;  // the copy's size; 0: no copy
    TensorDesc y;
    FilterDesc f;
    ConvDesc conv;
    int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, by pass
    size_t workspace_bytes = 0;
  };

  absl::StatusOr<const Plan*> GetPlan(cudnnHandle_t handle, const std::string& prefix,
                                      const std::vector<int64_t>& xd, const std::vector<int64_t>& fd,
                                      const std::vector<int64_t>& yd) {
    std::vector<int64_t> key = xd;
    key.insert(key.end(), fd.begin(), fd.end());
    key.insert(key.end(), yd.begin(), yd.end());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, Build(handle, prefix, xd, fd, yd));
    return plans_.emplace(std::move(key), std::move(plan)).first->second.get();
  }

  absl::StatusOr<std::unique_ptr<Plan>> Build(cudnnHandle_t handle, const std::string& prefix,
                                              const std::vector<int64_t>& xd, const std::vector<int64_t>& fd,
                                              const std::vector<int64_t>& yd) const {
    if (xd.size() != 4 || fd.size() != 4 || yd.size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "x, filter and y must have rank 4, got x [",
                                                     absl::StrJoin(xd, ","), "], filter [", absl::StrJoin(fd, ","),
                                                     "], y [", absl::StrJoin(yd, ","), "]"));
    }
    // The padding applied before and after x on each axis, as
    // ops/cpu/window.cc resolves it, and the output size it implies.
    int64_t before[2], after[2];
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t in = xd[2 + axis], out = yd[2 + axis], k = fd[2 + axis];
      const int64_t s = strides_[axis], d = dilations_[axis], effective = (k - 1) * d + 1;
      int64_t expected;
      if (padding_ == "EXPLICIT") {
        before[axis] = pads_[2 * axis];
        after[axis] = pads_[2 * axis + 1];
        expected = (in + before[axis] + after[axis] - effective) / s + 1;
      } else if (padding_ == "SAME") {
        const int64_t total = std::max<int64_t>(0, (out - 1) * s + effective - in);
        before[axis] = total / 2;
        after[axis] = total - total / 2;
        expected = (in + s - 1) / s;
      } else {
        before[axis] = after[axis] = 0;
        expected = (in - effective) / s + 1;
      }
      if (out != expected || in + before[axis] + after[axis] < effective) {
        return absl::InvalidArgumentError(absl::StrCat(prefix, "y [", absl::StrJoin(yd, ","),
                                                       "] is not the convolution's output for x [",
                                                       absl::StrJoin(xd, ","), "] and filter [",
                                                       absl::StrJoin(fd, ","), "]"));
      }
    }
    if (yd[0] != xd[0] || yd[1] != fd[0] || xd[1] != fd[1] * groups_ || fd[0] % groups_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "channels of x [", absl::StrJoin(xd, ","),
                                                     "], filter [", absl::StrJoin(fd, ","), "] and y [",
                                                     absl::StrJoin(yd, ","), "] disagree for ", groups_,
                                                     " group(s)"));
    }
    // cuDNN pads both sides by the smaller pad; the rest goes into the copy.
    const int64_t sym_h = std::min(before[0], after[0]), sym_w = std::min(before[1], after[1]);
    const int64_t pad_top = before[0] - sym_h, pad_left = before[1] - sym_w;
    const std::array<int64_t, 4> x_dims = {xd[0], xd[1], xd[2], xd[3]};
    const std::array<int64_t, 4> conv_x_dims = {xd[0], xd[1], xd[2] + pad_top + after[0] - sym_h,
                                                xd[3] + pad_left + after[1] - sym_w};
    const std::array<int64_t, 4> conv_x_strides = DenseStrides(conv_x_dims);
    const std::array<int64_t, 4> y_dims = {yd[0], yd[1], yd[2], yd[3]};
    if (!FitsInt({conv_x_dims[0], conv_x_dims[1], conv_x_dims[2], conv_x_dims[3], conv_x_strides[0],
                  xd[1] * xd[2] * xd[3], y_dims[1] * y_dims[2] * y_dims[3], y_dims[0], fd[0], fd[1], fd[2], fd[3],
                  sym_h, sym_w, strides_[0], strides_[1], dilations_[0], dilations_[1], groups_})) {
      return absl::UnimplementedError(absl::StrCat(prefix, "x [", absl::StrJoin(xd, ","), "], filter [",
                                                   absl::StrJoin(fd, ","),
                                                   "] or the window attributes exceed cuDNN's int sizes"));
    }

    auto plan = std::make_unique<Plan>();
    RETURN_IF_ERROR(MakeTensorDesc(&plan->x, conv_x_dims, conv_x_strides, prefix));
    if (conv_x_dims != x_dims) {
      plan->padded_elements = conv_x_dims[0] * conv_x_strides[0];
      plan->inner_offset = pad_top * conv_x_dims[3] + pad_left;
      RETURN_IF_ERROR(MakeTensorDesc(&plan->x_plain, x_dims, DenseStrides(x_dims), prefix));
      RETURN_IF_ERROR(MakeTensorDesc(&plan->x_inner, x_dims, conv_x_strides, prefix));
    }
    RETURN_IF_ERROR(MakeTensorDesc(&plan->y, y_dims, DenseStrides(y_dims), prefix));
    RETURN_IF_ERROR(cuda::CudnnStatus(cudnnCreateFilterDescriptor(plan->f.out()),
                                      absl::StrCat(prefix, "cudnnCreateFilterDescriptor")));
    RETURN_IF_ERROR(cuda::CudnnStatus(
        cudnnSetFilter4dDescriptor(plan->f.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(fd[0]),
                                   static_cast<int>(fd[1]), static_cast<int>(fd[2]), static_cast<int>(fd[3])),
        absl::StrCat(prefix, "cudnnSetFilter4dDescriptor [", absl::StrJoin(fd, ","), "]")));
    RETURN_IF_ERROR(cuda::CudnnStatus(cudnnCreateConvolutionDescriptor(plan->conv.out()),
                                      absl::StrCat(prefix, "cudnnCreateConvolutionDescriptor")));
    // Cross-correlation (no filter flip), as oneDNN and the frameworks do.
    RETURN_IF_ERROR(cuda::CudnnStatus(
        cudnnSetConvolution2dDescriptor(plan->conv.get(), static_cast<int>(sym_h), static_cast<int>(sym_w),
                                        static_cast<int>(strides_[0]), static_cast<int>(strides_[1]),
                                        static_cast<int>(dilations_[0]), static_cast<int>(dilations_[1]),
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        absl::StrCat(prefix, "cudnnSetConvolution2dDescriptor")));
    RETURN_IF_ERROR(cuda::CudnnStatus(cudnnSetConvolutionGroupCount(plan->conv.get(), static_cast<int>(groups_)),
                                      absl::StrCat(prefix, "cudnnSetConvolutionGroupCount")));
    RETURN_IF_ERROR(cuda::CudnnStatus(cudnnSetConvolutionMathType(plan->conv.get(), CUDNN_FMA_MATH),
                                      absl::StrCat(prefix, "cudnnSetConvolutionMathType")));
    // cuDNN's own view of the output must be y's dims, or the padding split
    // above is wrong.
    int n = 0, c = 0, oh = 0, ow = 0;
    RETURN_IF_ERROR(cuda::CudnnStatus(
        cudnnGetConvolution2dForwardOutputDim(plan->conv.get(), plan->x.get(), plan->f.get(), &n, &c, &oh, &ow),
        absl::StrCat(prefix, "cudnnGetConvolution2dForwardOutputDim")));
    if (n != yd[0] || c != yd[1] || oh != yd[2] || ow != yd[3]) {
      return absl::InternalError(absl::StrCat(prefix, "cuDNN's output [", n, ",", c, ",", oh, ",", ow,
                                              "] is not y [", absl::StrJoin(yd, ","), "]"));
    }
    RETURN_IF_ERROR(ChooseAlgorithm(handle, prefix, plan.get()));
    return plan;
  }

  absl::Status ChooseAlgorithm(cudnnHandle_t handle, const std::string& prefix, Plan* p) const {
    int count = 0;
    switch (pass_) {
      case ConvPass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t results[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        const std::string what = absl::StrCat(prefix, "cudnnGetConvolutionForwardAlgorithm_v7");
        RETURN_IF_ERROR(cuda::CudnnStatus(
            cudnnGetConvolutionForwardAlgorithm_v7(handle, p->x.get(), p->f.get(), p->conv.get(), p->y.get(),
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, results),
            what));
        ASSIGN_OR_RETURN(cudnnConvolutionFwdAlgoPerf_t chosen, PickAlgorithm(results, count, what));
        p->algo = chosen.algo;
        return cuda::CudnnStatus(cudnnGetConvolutionForwardWorkspaceSize(handle, p->x.get(), p->f.get(),
                                                                         p->conv.get(), p->y.get(), chosen.algo,
                                                                         &p->workspace_bytes),
                                 absl::StrCat(prefix, "cudnnGetConvolutionForwardWorkspaceSize"));
      }
      case ConvPass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        const std::string what = absl::StrCat(prefix, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        RETURN_IF_ERROR(cuda::CudnnStatus(
            cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, p->f.get(), p->y.get(), p->conv.get(), p->x.get(),
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, results),
            what));
        ASSIGN_OR_RETURN(cudnnConvolutionBwdDataAlgoPerf_t chosen, PickAlgorithm(results, count, what));
        p->algo = chosen.algo;
        return cuda::CudnnStatus(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, p->f.get(), p->y.get(),
                                                                              p->conv.get(), p->x.get(), chosen.algo,
                                                                              &p->workspace_bytes),
                                 absl::StrCat(prefix, "cudnnGetConvolutionBackwardDataWorkspaceSize"));
      }
      case ConvPass::kBackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        const std::string what = absl::StrCat(prefix, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        RETURN_IF_ERROR(cuda::CudnnStatus(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, p->x.get(), p->y.get(), p->conv.get(), p->f.get(),
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, results),
            what));
        ASSIGN_OR_RETURN(cudnnConvolutionBwdFilterAlgoPerf_t chosen, PickAlgorithm(results, count, what));
        p->algo = chosen.algo;
        return cuda::CudnnStatus(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, p->x.get(), p->y.get(),
                                                                                p->conv.get(), p->f.get(),
                                                                                chosen.algo, &p->workspace_bytes),
                                 absl::StrCat(prefix, "cudnnGetConvolutionBackwardFilterWorkspaceSize"));
      }
    }
    return absl::InternalError(absl::StrCat(prefix, "unknown convolution pass"));
  }

  const ConvPass pass_;
  std::vector<int64_t> strides_{1, 1};
  std::vector<int64_t> dilations_{1, 1};  // 1: none (cuDNN counts as we do)
  std::string padding_ = "VALID";
  std::vector<int64_t> pads_;  // top, bottom, left, right (EXPLICIT)
  int64_t groups_ = 1;

  std::mutex mu_;  // guards plans_ (Compute runs concurrently for different steps)
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;  // by x, filter and y dims
};

class Conv2DGpuKernel : public ConvGpuKernel {
 public:
  Conv2DGpuKernel() : ConvGpuKernel(ConvPass::kForward) {}
};
class Conv2DBackpropInputGpuKernel : public ConvGpuKernel {
 public:
  Conv2DBackpropInputGpuKernel() : ConvGpuKernel(ConvPass::kBackwardData) {}
};
class Conv2DBackpropFilterGpuKernel : public ConvGpuKernel {
 public:
  Conv2DBackpropFilterGpuKernel() : ConvGpuKernel(ConvPass::kBackwardFilter) {}
};

NEREID_REGISTER_KERNEL("Conv2D", kGpu, DT_FLOAT, Conv2DGpuKernel);
NEREID_REGISTER_KERNEL("Conv2DBackpropInput", kGpu, DT_FLOAT, Conv2DBackpropInputGpuKernel);
NEREID_REGISTER_KERNEL("Conv2DBackpropFilter", kGpu, DT_FLOAT, Conv2DBackpropFilterGpuKernel);

}  // namespace
}  // namespace nereid
