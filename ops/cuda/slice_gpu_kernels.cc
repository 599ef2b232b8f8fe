// GPU kernels that cut tensors into blocks and put blocks together: Concat
// and its gradient (SliceLike, a slice), Slice and its gradient, Pad and its
// gradient, with the CPU kernels' semantics (ops/cpu/array_kernels.cc) and
// their blocks (ops/block_copies.h): each block is one cudaMemcpy2DAsync on the node's stream (one copy per
// row where a block is a single row or its pitch is wider than CUDA takes),
// so the values are the host's exactly. A padded NCHW tensor is a block per
// plane, a strided slice one per outer index: many small calls on large
// tensors, which a gather kernel would save.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/block_copies.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

// The widest pitch cudaMemcpy2DAsync takes (cudaDevAttrMaxPitch on current
// GPUs); a block with a wider one goes row by row.
constexpr size_t kMaxPitchBytes = (size_t{1} << 31) - 1;

// `block` from the part's side to the whole's (or back, `to_part`).
absl::Status CopyBlock(const BlockCopy& block, float* part, float* whole, bool to_part, cudaStream_t stream,
                       const OpKernelContext& ctx) {
  if (block.width == 0 || block.rows == 0) return absl::OkStatus();
  constexpr size_t kFloat = sizeof(float);
  const std::string what = absl::StrCat(cuda::Prefix(ctx.node()), "copying a block");
  float* part_at = part + block.part_at;
  float* whole_at = whole + block.whole_at;
  float* dst = to_part ? part_at : whole_at;
  const float* src = to_part ? whole_at : part_at;
  const size_t dst_pitch = (to_part ? block.part_pitch : block.whole_pitch) * kFloat;
  const size_t src_pitch = (to_part ? block.whole_pitch : block.part_pitch) * kFloat;
  const size_t width = block.width * kFloat;
  if (block.rows == 1 || std::max(dst_pitch, src_pitch) > kMaxPitchBytes) {
    for (int64_t r = 0; r < block.rows; ++r) {
      RETURN_IF_ERROR(cuda::CopyOnStream(reinterpret_cast<char*>(dst) + r * dst_pitch,
                                         reinterpret_cast<const char*>(src) + r * src_pitch, width, stream, what));
    }
    return absl::OkStatus();
  }
  return cuda::CudaStatus(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(block.rows),
                                            cudaMemcpyDeviceToDevice, stream),
                          absl::StrCat(what, ": cudaMemcpy2DAsync"));
}

float* Data(const Tensor& t) { return const_cast<float*>(t.data<float>()); }

// y = the inputs side by side along `axis`.
class ConcatGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const int axis = NormalizedAxis(axis_, y->rank());
    int64_t offset = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      RETURN_IF_ERROR(
          CopyBlock(ConcatBlock(x.dims(), y->dims(), axis, offset), Data(x), y->data<float>(), false, stream, *ctx));
      offset += x.dim(axis);
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 1;
};

// Slice: y = x[..., begin : begin + size * stride : stride, ...] along
// `axis`; SliceGrad (dy, x): zeros of x's shape with dy written back there.
template <bool kGradient>
class SliceGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    attrs_ = ReadSliceAttrs(attrs);
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& in = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& whole = kGradient ? *out : in;
    const Tensor& part = kGradient ? in : *out;
    const int axis = NormalizedAxis(attrs_.axis, whole.rank());
    std::vector<BlockCopy> blocks;
    if (absl::Status s = SliceBlocks(whole.dims(), axis, attrs_.begin, part.dim(axis), attrs_.stride, &blocks);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(cuda::Prefix(ctx->node()), s.message()));
    }
    if (kGradient && out->num_bytes() > 0) {
      RETURN_IF_ERROR(cuda::CudaStatus(cudaMemsetAsync(out->raw(), 0, out->num_bytes(), stream),
                                       absl::StrCat(cuda::Prefix(ctx->node()), "cudaMemsetAsync")));
    }
    for (const BlockCopy& b : blocks) {
      RETURN_IF_ERROR(CopyBlock(b, Data(part), Data(whole), !kGradient, stream, *ctx));
    }
    return absl::OkStatus();
  }

 private:
  SliceAttrs attrs_;
};

// Pad: y = x with the pads around each axis, `value` there; PadGrad (dy,
// x): dy's interior, x's shape.
template <bool kGradient>
class PadGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    attrs_ = ReadPadAttrs(attrs);
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& small = kGradient ? *out : ctx->input(0);
    const Tensor& large = kGradient ? ctx->input(0) : *out;
    std::vector<BlockCopy> blocks;
    if (absl::Status s = PadBlocks(small.dims(), large.dims(), attrs_.pads, &blocks); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(cuda::Prefix(ctx->node()), s.message()));
    }
    if (!kGradient && out->num_elements() > 0) {
      RETURN_IF_ERROR(
          cuda::Launched(cuda::math::Fill(out->data<float>(), attrs_.value, out->num_elements(), stream), *ctx));
    }
    for (const BlockCopy& b : blocks) {
      RETURN_IF_ERROR(CopyBlock(b, Data(small), Data(large), kGradient, stream, *ctx));
    }
    return absl::OkStatus();
  }

 private:
  PadAttrs attrs_;
};

}  // namespace

NEREID_REGISTER_KERNEL("Concat", kGpu, DT_FLOAT, ConcatGpuKernel);
// SliceLike (dy, x), Concat's gradient: dy sliced to x's length (the output's).
NEREID_REGISTER_KERNEL("SliceLike", kGpu, DT_FLOAT, SliceGpuKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("Slice", kGpu, DT_FLOAT, SliceGpuKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("SliceGrad", kGpu, DT_FLOAT, SliceGpuKernel</*gradient=*/true>);
NEREID_REGISTER_KERNEL("Pad", kGpu, DT_FLOAT, PadGpuKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("PadGrad", kGpu, DT_FLOAT, PadGpuKernel</*gradient=*/true>);

}  // namespace nereid
