// Concat and the slice that is its gradient: both copy contiguous runs of
// [outer, axis, inner] views.

#include <cstring>

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

// (dy, x) -> dy[..., begin : begin + x.dim(axis), ...]; Slice's (x) ->
// x[..., begin : begin + size, ...] is the same copy.
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

NEREID_REGISTER_KERNEL("Concat", kCpu, DT_FLOAT, ConcatKernel);
NEREID_REGISTER_KERNEL("SliceLike", kCpu, DT_FLOAT, SliceLikeKernel);
// The output's shape holds the size: the same copy.
NEREID_REGISTER_KERNEL("Slice", kCpu, DT_FLOAT, SliceLikeKernel);

}  // namespace
}  // namespace nereid
