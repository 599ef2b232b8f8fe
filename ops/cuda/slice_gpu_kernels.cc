// GPU kernels that cut tensors into blocks and put blocks together: Concat,
// Slice and its gradient, Pad and its gradient, with the CPU kernels'
// semantics (ops/cpu/array_kernels.cc). Every block is a run of rows at a
// fixed pitch, so each is one cudaMemcpy2DAsync on the node's stream (a
// strided slice one per outer index, a padded tensor one per plane): the
// values are the host's exactly.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

int64_t ProductOf(const std::vector<int64_t>& dims, int begin, int end) {
  return std::accumulate(dims.begin() + begin, dims.begin() + end, int64_t{1}, std::multiplies<int64_t>());
}

int AxisOf(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

// `rows` runs of `width` floats from `src` (one every `src_pitch` floats) to
// `dst` (one every `dst_pitch`), on the stream.
absl::Status CopyRows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width, int64_t rows,
                      cudaStream_t stream, const OpKernelContext& ctx) {
  if (width == 0 || rows == 0) return absl::OkStatus();
  constexpr size_t kFloat = sizeof(float);
  return cuda::CudaStatus(
      cudaMemcpy2DAsync(dst, dst_pitch * kFloat, src, src_pitch * kFloat, width * kFloat, rows,
                        cudaMemcpyDeviceToDevice, stream),
      absl::StrCat(cuda::Prefix(ctx.node()), "cudaMemcpy2DAsync"));
}

// y = the inputs side by side along `axis`: each input is `outer` rows of
// its own width, written at its offset in y's rows.
class ConcatGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const std::vector<int64_t>& dims = y->dims();
    const int rank = static_cast<int>(dims.size());
    const int axis = AxisOf(axis_, rank);
    const int64_t outer = ProductOf(dims, 0, axis), inner = ProductOf(dims, axis + 1, rank);
    const int64_t out_row = dims[axis] * inner;
    int64_t offset = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      const int64_t row = x.dim(axis) * inner;
      RETURN_IF_ERROR(CopyRows(y->data<float>() + offset, out_row, x.data<float>(), row, row, outer, stream, *ctx));
      offset += row;
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
    axis_ = attrs.at("axis")->i();
    begin_ = attrs.at("begin")->i();
    stride_ = attrs.at("stride")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& in = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& whole = kGradient ? *out : in;
    const Tensor& part = kGradient ? in : *out;
    const int axis = AxisOf(axis_, whole.rank());
    const int64_t outer = ProductOf(whole.dims(), 0, axis), inner = ProductOf(whole.dims(), axis + 1, whole.rank());
    const int64_t n = whole.dim(axis), size = part.dim(axis);
    if (begin_ < 0 || (size > 0 && begin_ + (size - 1) * stride_ >= n)) {
      return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx->node()), "slice of ", size, " from ", begin_,
                                                     " in steps of ", stride_, " is outside dimension ", axis, " of ",
                                                     whole.DebugString()));
    }
    if (kGradient && out->num_bytes() > 0) {
      RETURN_IF_ERROR(cuda::CudaStatus(cudaMemsetAsync(out->raw(), 0, out->num_bytes(), stream),
                                       absl::StrCat(cuda::Prefix(ctx->node()), "cudaMemsetAsync")));
    }
    float* whole_data = kGradient ? out->data<float>() : const_cast<float*>(in.data<float>());
    float* part_data = kGradient ? const_cast<float*>(in.data<float>()) : out->data<float>();
    // Copies one way or the other between the whole's and the part's rows.
    auto copy = [&](int64_t whole_at, int64_t whole_pitch, int64_t part_at, int64_t part_pitch, int64_t width,
                    int64_t rows) {
      if (kGradient) {
        return CopyRows(whole_data + whole_at, whole_pitch, part_data + part_at, part_pitch, width, rows, stream, *ctx);
      }
      return CopyRows(part_data + part_at, part_pitch, whole_data + whole_at, whole_pitch, width, rows, stream, *ctx);
    };
    if (stride_ == 1) {  // each outer index's part is one run of size x inner
      return copy(begin_ * inner, n * inner, 0, size * inner, size * inner, outer);
    }
    for (int64_t o = 0; o < outer; ++o) {  // `size` runs of `inner`, `stride` apart
      RETURN_IF_ERROR(copy((o * n + begin_) * inner, stride_ * inner, o * size * inner, inner, inner, size));
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0, begin_ = 0, stride_ = 1;
};

// Pad: y = x with `pads` (begins, then ends) around each axis, `value`
// there; PadGrad (dy, x): dy's interior, x's shape. The small tensor's
// planes (all axes but the last two) are each one block of rows.
template <bool kGradient>
class PadGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    const auto& pads = attrs.at("pads")->list().i();
    pads_.assign(pads.begin(), pads.end());
    auto value = attrs.find("value");
    value_ = value == attrs.end() ? 0.0f : value->second->f();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& small = kGradient ? *out : ctx->input(0);
    const Tensor& large = kGradient ? ctx->input(0) : *out;
    const int rank = small.rank();
    if (static_cast<int>(pads_.size()) != 2 * rank) {
      return absl::InvalidArgumentError(absl::StrCat(cuda::Prefix(ctx->node()), "pads do not match the rank"));
    }
    if (!kGradient && out->num_elements() > 0) {
      RETURN_IF_ERROR(
          cuda::Launched(cuda::math::Fill(out->data<float>(), value_, out->num_elements(), stream), *ctx));
    }
    if (small.num_elements() == 0) return absl::OkStatus();
    std::vector<int64_t> strides(rank, 1);
    for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * large.dim(d + 1);
    const int64_t row = rank == 0 ? 1 : small.dim(rank - 1);
    const int64_t rows = rank < 2 ? 1 : small.dim(rank - 2);
    const int64_t large_pitch = rank == 0 ? 1 : large.dim(rank - 1);
    const int64_t planes = small.num_elements() / (row * rows);
    float* small_data = kGradient ? out->data<float>() : const_cast<float*>(ctx->input(0).data<float>());
    float* large_data = kGradient ? const_cast<float*>(ctx->input(0).data<float>()) : out->data<float>();
    for (int64_t p = 0; p < planes; ++p) {
      // The plane's first row in the large tensor: its index shifted by the begin pads.
      int64_t rest = p, offset = 0;
      if (rank >= 1) offset += pads_[rank - 1];
      if (rank >= 2) offset += pads_[rank - 2] * strides[rank - 2];
      for (int d = rank - 3; d >= 0; --d) {
        offset += (rest % small.dim(d) + pads_[d]) * strides[d];
        rest /= small.dim(d);
      }
      float* small_at = small_data + p * rows * row;
      if (kGradient) {
        RETURN_IF_ERROR(CopyRows(small_at, row, large_data + offset, large_pitch, row, rows, stream, *ctx));
      } else {
        RETURN_IF_ERROR(CopyRows(large_data + offset, large_pitch, small_at, row, row, rows, stream, *ctx));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> pads_;
  float value_ = 0.0f;
};

}  // namespace

NEREID_REGISTER_KERNEL("Concat", kGpu, DT_FLOAT, ConcatGpuKernel);
NEREID_REGISTER_KERNEL("Slice", kGpu, DT_FLOAT, SliceGpuKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("SliceGrad", kGpu, DT_FLOAT, SliceGpuKernel</*gradient=*/true>);
NEREID_REGISTER_KERNEL("Pad", kGpu, DT_FLOAT, PadGpuKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("PadGrad", kGpu, DT_FLOAT, PadGpuKernel</*gradient=*/true>);

}  // namespace nereid
