// Concat and the slice that is its gradient: both copy contiguous runs of
// [outer, axis, inner] views; Transpose: a strided gather; Pad and its gradient.

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/block_copies.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {


// A block copied run by run (ops/block_copies.h), part -> whole or back.
void CopyBlock(const BlockCopy& block, float* part, float* whole, bool to_part) {
  for (int64_t r = 0; r < block.rows; ++r) {
    float* p = part + block.part_at + r * block.part_pitch;
    float* w = whole + block.whole_at + r * block.whole_pitch;
    std::memcpy(to_part ? p : w, to_part ? w : p, block.width * sizeof(float));
  }
}

float* Data(const Tensor& t) { return const_cast<float*>(t.data<float>()); }

class ConcatKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const int axis = NormalizedAxis(axis_, y->rank());
    int64_t offset = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      CopyBlock(ConcatBlock(x.dims(), y->dims(), axis, offset), Data(x), y->data<float>(), /*to_part=*/false);
      offset += x.dim(axis);
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 1;
};

// Slice (x) -> x[.., begin : .. : stride, ..] along `axis`, and its gradient
// (dy, x) -> zeros of x's shape with dy written back there. Both walk the
// [outer, n, inner] view of the large side and copy runs of `inner`, except a
// slice that is one contiguous block of x, which shares x's buffer (no kernel
// writes into its inputs).
template <bool kGradient>
class StridedSliceKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    attrs_ = ReadSliceAttrs(attrs);
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    if (!kGradient && attrs_.stride == 1 && in.num_elements() > 0) {
      // A run of whole rows (nothing before the axis but ones) is one
      // contiguous block of the input: handed on without a copy (the
      // parameter server cuts every gradient into chunks like this).
      const std::vector<int64_t>& dims = ctx->output_dims(0);
      const int axis = NormalizedAxis(attrs_.axis, in.rank());
      const int64_t outer = DimsProduct(in.dims(), 0, axis), inner = DimsProduct(in.dims(), axis + 1, in.rank());
      if (outer == 1 && attrs_.begin >= 0 && attrs_.begin + dims[axis] <= in.dim(axis)) {
        // The view's owner holds a copy of the input, which keeps its buffer alive.
        const float* first = in.data<float>() + attrs_.begin * inner;
        std::shared_ptr<void> view(const_cast<float*>(first), [keep = in](void*) {});
        return ctx->SetOutput(0, Tensor::Wrap(in.dtype(), dims, std::move(view)));
      }
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& whole = kGradient ? *out : in;
    const Tensor& part = kGradient ? in : *out;
    const int axis = NormalizedAxis(attrs_.axis, whole.rank());
    std::vector<BlockCopy> blocks;
    RETURN_IF_ERROR(SliceBlocks(whole.dims(), axis, attrs_.begin, part.dim(axis), attrs_.stride, &blocks));
    if (kGradient) std::memset(out->raw(), 0, out->num_bytes());
    // Unit stride: a block of one run of size x inner per outer index (a
    // column block of a matrix is a memcpy per row, not per element).
    for (const BlockCopy& b : blocks) CopyBlock(b, Data(part), Data(whole), /*to_part=*/!kGradient);
    return absl::OkStatus();
  }

 private:
  SliceAttrs attrs_;
};

// Pad (x) -> y, and its gradient (dy, x) -> dx: the copy between x and the
// interior of the padded tensor, a run of the last axis at a time.
template <bool kGradient>
class PadKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    attrs_ = ReadPadAttrs(attrs);
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& small = kGradient ? *out : ctx->input(0);
    const Tensor& large = kGradient ? ctx->input(0) : *out;
    std::vector<BlockCopy> blocks;
    RETURN_IF_ERROR(PadBlocks(small.dims(), large.dims(), attrs_.pads, &blocks));
    if (!kGradient) std::fill(out->data<float>(), out->data<float>() + out->num_elements(), attrs_.value);
    for (const BlockCopy& b : blocks) CopyBlock(b, Data(small), Data(large), /*to_part=*/kGradient);
    return absl::OkStatus();
  }

 private:
  PadAttrs attrs_;
};

NEREID_REGISTER_KERNEL("Pad", kCpu, DT_FLOAT, PadKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("PadGrad", kCpu, DT_FLOAT, PadKernel</*gradient=*/true>);

// y[i] = x[offset of y's index i seen through the permuted strides]; each
// thread walks its range of y with an odometer over the output index.
template <typename T>
class TransposeKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    const auto& given = attrs.at("perm")->list().i();
    perm_.assign(given.begin(), given.end());
    if (perm_.empty()) {
      for (int i = node.outputs()[0].shape.rank() - 1; i >= 0; --i) perm_.push_back(i);
    }
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0, x.dtype()));
    const int rank = x.rank();
    std::vector<int64_t> in_strides(rank, 1), strides(rank);
    for (int d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * x.dim(d + 1);
    for (int d = 0; d < rank; ++d) strides[d] = in_strides[perm_[d]];
    const std::vector<int64_t>& out_dims = y->dims();
    const T* in = x.data<T>();
    T* out = y->data<T>();
    cpu::ParallelFor(ctx, y->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> index(rank);
      int64_t offset = 0, rest = begin;
      for (int d = rank - 1; d >= 0; --d) {
        index[d] = rest % out_dims[d];
        rest /= out_dims[d];
        offset += index[d] * strides[d];
      }
      for (int64_t i = begin; i < end; ++i) {
        out[i] = in[offset];
        for (int d = rank - 1; d >= 0; --d) {
          offset += strides[d];
          if (++index[d] < out_dims[d]) break;
          offset -= strides[d] * out_dims[d];
          index[d] = 0;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> perm_;
};

NEREID_REGISTER_KERNEL("Transpose", kCpu, DT_FLOAT, TransposeKernel<float>);
NEREID_REGISTER_KERNEL("Transpose", kCpu, DT_INT32, TransposeKernel<int32_t>);
NEREID_REGISTER_KERNEL("Transpose", kCpu, DT_INT64, TransposeKernel<int64_t>);
NEREID_REGISTER_KERNEL("Concat", kCpu, DT_FLOAT, ConcatKernel);
// SliceLike (dy, x), Concat's gradient: dy sliced to x's length (the output's).
NEREID_REGISTER_KERNEL("SliceLike", kCpu, DT_FLOAT, StridedSliceKernel</*gradient=*/false>);
// The output's shape holds the size: the same copy.
NEREID_REGISTER_KERNEL("Slice", kCpu, DT_FLOAT, StridedSliceKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("SliceGrad", kCpu, DT_FLOAT, StridedSliceKernel</*gradient=*/true>);

}  // namespace
}  // namespace nereid
