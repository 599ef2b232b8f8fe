// Add, Mul and Div with NumPy broadcasting, the reduction that undoes a broadcast
// in the backward pass, and AddN (gradient accumulation).

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

// Strides of `in` seen from an output of rank out_rank: aligned at the
// right, 0 where `in` is broadcast.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (int i = static_cast<int>(in.size()) - 1, o = static_cast<int>(out.size()) - 1; i >= 0; --i, --o) {
    strides[o] = in[i] == 1 && out[o] != 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

// The offset into an input with `strides` of output element `index`.
int64_t OffsetOf(int64_t index, const std::vector<int64_t>& out, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    offset += (index % out[d]) * strides[d];
    index /= out[d];
  }
  return offset;
}

template <typename F>
class BinaryKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* out = y->data<float>();
    if (a.dims() == b.dims()) {
      cpu::ParallelFor(ctx, y->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = F::Apply(pa[i], pb[i]);
      });
      return absl::OkStatus();
    }
    const std::vector<int64_t>& dims = y->dims();
    std::vector<int64_t> sa = BroadcastStrides(a.dims(), dims), sb = BroadcastStrides(b.dims(), dims);
    cpu::ParallelFor(ctx, y->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = F::Apply(pa[OffsetOf(i, dims, sa)], pb[OffsetOf(i, dims, sb)]);
    });
    return absl::OkStatus();
  }
};

struct AddOp {
  static float Apply(float a, float b) { return a + b; }
};
struct MulOp {
  static float Apply(float a, float b) { return a * b; }
};
struct DivOp {
  static float Apply(float a, float b) { return a / b; }
};

// (dy, x) -> dy summed down to x's shape; dy itself when nothing was
// broadcast.
class ReduceToShapeOfKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    if (dy.dims() == ctx->output_dims(0)) return ctx->SetOutput(0, dy);
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    std::vector<int64_t> strides = BroadcastStrides(dx->dims(), dy.dims());
    float* out = dx->data<float>();
    for (int64_t i = 0; i < dx->num_elements(); ++i) out[i] = 0;
    const float* in = dy.data<float>();
    for (int64_t i = 0; i < dy.num_elements(); ++i) out[OffsetOf(i, dy.dims(), strides)] += in[i];
    return absl::OkStatus();
  }
};

// Sums in input order, so accumulation does not depend on which gradient
// finished first.
class AddNKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    for (int i = 1; i < ctx->num_inputs(); ++i) {
      if (ctx->input(i).dims() != ctx->input(0).dims()) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", ctx->input(i).DebugString(),
                                                       " but input 0 is ", ctx->input(0).DebugString()));
      }
    }
    if (ctx->num_inputs() == 1) return ctx->SetOutput(0, ctx->input(0));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    float* out = y->data<float>();
    cpu::ParallelFor(ctx, y->num_elements(), cpu::kElementwiseGrain, [&](int64_t begin, int64_t end) {
      const float* first = ctx->input(0).data<float>();
      for (int64_t j = begin; j < end; ++j) out[j] = first[j];
      for (int i = 1; i < ctx->num_inputs(); ++i) {
        const float* in = ctx->input(i).data<float>();
        for (int64_t j = begin; j < end; ++j) out[j] += in[j];
      }
    });
    return absl::OkStatus();
  }
};

NEREID_REGISTER_KERNEL("Add", kCpu, DT_FLOAT, BinaryKernel<AddOp>);
NEREID_REGISTER_KERNEL("Mul", kCpu, DT_FLOAT, BinaryKernel<MulOp>);
NEREID_REGISTER_KERNEL("Div", kCpu, DT_FLOAT, BinaryKernel<DivOp>);
NEREID_REGISTER_KERNEL("ReduceToShapeOf", kCpu, DT_FLOAT, ReduceToShapeOfKernel);
NEREID_REGISTER_KERNEL("AddN", kCpu, DT_FLOAT, AddNKernel);

}  // namespace
}  // namespace nereid
