// Concat and the slice that is its gradient: both copy contiguous runs of
// [outer, axis, inner] views; Transpose: a strided gather; Pad and its gradient.

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

int64_t Product(const std::vector<int64_t>& dims, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= dims[i];
  return p;
}

int NormalizeAxis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

class ConcatKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const std::vector<int64_t>& dims = y->dims();
    int axis = NormalizeAxis(axis_, static_cast<int>(dims.size()));
    int64_t outer = Product(dims, 0, axis), inner = Product(dims, axis + 1, static_cast<int>(dims.size()));
    int64_t out_row = dims[axis] * inner;
    int64_t offset = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& x = ctx->input(i);
      int64_t row = x.dim(axis) * inner;
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(y->data<float>() + o * out_row + offset, x.data<float>() + o * row, row * sizeof(float));
      }
      offset += row;
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 1;
};

// (dy, x) -> dy[..., begin : begin + x.dim(axis), ...] (Concat's gradient).
class SliceLikeKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    axis_ = attrs.at("axis")->i();
    begin_ = attrs.at("begin")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    int axis = NormalizeAxis(axis_, dy.rank());
    int64_t outer = Product(dy.dims(), 0, axis), inner = Product(dy.dims(), axis + 1, dy.rank());
    int64_t in_row = dy.dim(axis) * inner, out_row = dx->dim(axis) * inner;
    if (begin_ < 0 || begin_ + dx->dim(axis) > dy.dim(axis)) {
      return absl::InvalidArgumentError(absl::StrCat("slice [", begin_, ", ", begin_ + dx->dim(axis),
                                                     ") is outside dimension ", axis, " of ", dy.DebugString()));
    }
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dx->data<float>() + o * out_row, dy.data<float>() + o * in_row + begin_ * inner,
                  out_row * sizeof(float));
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 1, begin_ = 0;
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
    axis_ = attrs.at("axis")->i();
    begin_ = attrs.at("begin")->i();
    stride_ = attrs.at("stride")->i();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    if (!kGradient && stride_ == 1 && in.num_elements() > 0) {
      // A run of whole rows (nothing before the axis but ones) is one
      // contiguous block of the input: handed on without a copy (the
      // parameter server cuts every gradient into chunks like this).
      const std::vector<int64_t>& dims = ctx->output_dims(0);
      const int axis = NormalizeAxis(axis_, in.rank());
      const int64_t outer = Product(in.dims(), 0, axis), inner = Product(in.dims(), axis + 1, in.rank());
      if (outer == 1 && begin_ >= 0 && begin_ + dims[axis] <= in.dim(axis)) {
        // The view's owner holds a copy of the input, which keeps its buffer alive.
        const float* first = in.data<float>() + begin_ * inner;
        std::shared_ptr<void> view(const_cast<float*>(first), [keep = in](void*) {});
        return ctx->SetOutput(0, Tensor::Wrap(in.dtype(), dims, std::move(view)));
      }
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& whole = kGradient ? *out : in;
    const Tensor& part = kGradient ? in : *out;
    const int axis = NormalizeAxis(axis_, whole.rank());
    const int64_t outer = Product(whole.dims(), 0, axis), inner = Product(whole.dims(), axis + 1, whole.rank());
    const int64_t n = whole.dim(axis), size = part.dim(axis);
    if (begin_ < 0 || begin_ + (size - 1) * stride_ >= n) {
      return absl::InvalidArgumentError(absl::StrCat("slice of ", size, " from ", begin_, " in steps of ", stride_,
                                                     " is outside dimension ", axis, " of ", whole.DebugString()));
    }
    if (kGradient) std::memset(out->raw(), 0, out->num_bytes());
    float* dst = out->data<float>();
    const float* src = in.data<float>();
    // Unit stride: each outer index's part is one run of size x inner
    // elements (a column block of a matrix is a memcpy per row, not per
    // element).
    const int64_t run = stride_ == 1 ? size : 1;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < size; i += run) {
        const int64_t whole_at = (o * n + begin_ + i * stride_) * inner, part_at = (o * size + i) * inner;
        std::memcpy(dst + (kGradient ? whole_at : part_at), src + (kGradient ? part_at : whole_at),
                    run * inner * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_ = 0, begin_ = 0, stride_ = 1;
};

// Pad (x) -> y, and its gradient (dy, x) -> dx: the copy between x and the
// interior of the padded tensor, a run of the last axis at a time.
template <bool kGradient>
class PadKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    const auto& pads = attrs.at("pads")->list().i();
    pads_.assign(pads.begin(), pads.end());
    auto value = attrs.find("value");
    value_ = value == attrs.end() ? 0.0f : value->second->f();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    const Tensor& small = kGradient ? *out : ctx->input(0);
    const Tensor& large = kGradient ? ctx->input(0) : *out;
    const int rank = small.rank();
    if (static_cast<int>(pads_.size()) != 2 * rank) return absl::InvalidArgumentError("pads do not match the rank");
    if (!kGradient) std::fill(out->data<float>(), out->data<float>() + out->num_elements(), value_);
    if (small.num_elements() == 0) return absl::OkStatus();
    // Strides of the large tensor; each run of the small one's last axis
    // starts at the large offset of its index shifted by the begin pads.
    std::vector<int64_t> strides(rank, 1);
    for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * large.dim(d + 1);
    const int64_t row = rank == 0 ? 1 : small.dim(rank - 1);
    const int64_t rows = small.num_elements() / row;
    const float* src = ctx->input(0).data<float>();
    float* dst = out->data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rest = r, offset = rank == 0 ? 0 : pads_[rank - 1];
      for (int d = rank - 2; d >= 0; --d) {
        offset += (rest % small.dim(d) + pads_[d]) * strides[d];
        rest /= small.dim(d);
      }
      if (kGradient) {
        std::memcpy(dst + r * row, src + offset, row * sizeof(float));
      } else {
        std::memcpy(dst + offset, src + r * row, row * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> pads_;
  float value_ = 0.0f;
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
NEREID_REGISTER_KERNEL("SliceLike", kCpu, DT_FLOAT, SliceLikeKernel);
// The output's shape holds the size: the same copy.
NEREID_REGISTER_KERNEL("Slice", kCpu, DT_FLOAT, StridedSliceKernel</*gradient=*/false>);
NEREID_REGISTER_KERNEL("SliceGrad", kCpu, DT_FLOAT, StridedSliceKernel</*gradient=*/true>);

}  // namespace
}  // namespace nereid
