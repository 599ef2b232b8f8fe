// Add, Sub, Mul, Div, Pow and Where with NumPy broadcasting (and the pieces
// of their gradients), Expand, the reduction that undoes a broadcast in the
// backward pass, and AddN (gradient accumulation).

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/elementwise_loops.h"

namespace nereid {
namespace {

struct AddOp {
  static float Apply(float a, float b) { return a + b; }
};
struct SubOp {
  static float Apply(float a, float b) { return a - b; }
};
struct MulOp {
  static float Apply(float a, float b) { return a * b; }
};
struct DivOp {
  static float Apply(float a, float b) { return a / b; }
};
struct PowOp {
  static float Apply(float a, float b) { return std::pow(a, b); }
};
struct DivGradDivisor {
  static float Apply(float dy, float y, float b) { return -dy * y / b; }
};
struct PowGradBase {
  static float Apply(float dy, float a, float b) { return dy * b * std::pow(a, b - 1); }
};
struct PowGradExponent {
  static float Apply(float dy, float a, float y) { return dy * y * std::log(a); }
};

struct WhereOp {
  static float Apply(float condition, float x, float y) { return condition != 0.0f ? x : y; }
};
struct Copy {
  static float Apply(float x) { return x; }
};

// dy where the condition holds (branch true) or where it does not.
class WhereGradKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    branch_ = attrs.at("branch")->b();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override { return branch_ ? taken_.Compute(ctx) : other_.Compute(ctx); }

 private:
  struct Taken {
    static float Apply(float dy, float condition) { return condition != 0.0f ? dy : 0.0f; }
  };
  struct Other {
    static float Apply(float dy, float condition) { return condition != 0.0f ? 0.0f : dy; }
  };
  bool branch_ = true;
  cpu::BroadcastKernel<2, Taken> taken_;
  cpu::BroadcastKernel<2, Other> other_;
};

// (dy, x) -> dy summed down to x's shape; dy itself when nothing was
// broadcast.
class ReduceToShapeOfKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    if (dy.dims() == ctx->output_dims(0)) return ctx->SetOutput(0, dy);
    ASSIGN_OR_RETURN(Tensor * dx, ctx->AllocateOutput(0));
    std::vector<int64_t> strides = cpu::BroadcastStrides(dx->dims(), dy.dims());
    float* out = dx->data<float>();
    for (int64_t i = 0; i < dx->num_elements(); ++i) out[i] = 0;
    const float* in = dy.data<float>();
    if (const int64_t period = cpu::RepeatPeriod(dx->dims(), dy.dims()); period > 0) {
      // x repeated whole (a bias): add dy's rows in order, along the row.
      for (int64_t row = 0; row < dy.num_elements() / period; ++row) {
        const float* src = in + row * period;
        for (int64_t j = 0; j < period; ++j) out[j] += src[j];
      }
      return absl::OkStatus();
    }
    for (int64_t i = 0; i < dy.num_elements(); ++i) out[cpu::BroadcastOffset(i, dy.dims(), strides)] += in[i];
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

template <typename F>
using Unary = cpu::BroadcastKernel<1, F>;
template <typename F>
using Binary = cpu::BroadcastKernel<2, F>;
template <typename F>
using Ternary = cpu::BroadcastKernel<3, F>;

NEREID_REGISTER_KERNEL("Add", kCpu, DT_FLOAT, Binary<AddOp>);
NEREID_REGISTER_KERNEL("Sub", kCpu, DT_FLOAT, Binary<SubOp>);
NEREID_REGISTER_KERNEL("Mul", kCpu, DT_FLOAT, Binary<MulOp>);
NEREID_REGISTER_KERNEL("Div", kCpu, DT_FLOAT, Binary<DivOp>);
NEREID_REGISTER_KERNEL("Pow", kCpu, DT_FLOAT, Binary<PowOp>);
NEREID_REGISTER_KERNEL("DivGradDivisor", kCpu, DT_FLOAT, Ternary<DivGradDivisor>);
NEREID_REGISTER_KERNEL("PowGradBase", kCpu, DT_FLOAT, Ternary<PowGradBase>);
NEREID_REGISTER_KERNEL("PowGradExponent", kCpu, DT_FLOAT, Ternary<PowGradExponent>);
NEREID_REGISTER_KERNEL("Where", kCpu, DT_FLOAT, Ternary<WhereOp>);
NEREID_REGISTER_KERNEL("WhereGrad", kCpu, DT_FLOAT, WhereGradKernel);
NEREID_REGISTER_KERNEL("Expand", kCpu, DT_FLOAT, Unary<Copy>);
NEREID_REGISTER_KERNEL("ReduceToShapeOf", kCpu, DT_FLOAT, ReduceToShapeOfKernel);
NEREID_REGISTER_KERNEL("AddN", kCpu, DT_FLOAT, AddNKernel);

}  // namespace
}  // namespace nereid
