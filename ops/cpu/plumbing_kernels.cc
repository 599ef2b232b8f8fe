// Kernels that move no arithmetic: sources (Input, Parameter, Const), values
// passed through (Identity, Feedback, Gradient), and reshapes, which share
// their input's buffer.

#include "core/initializers.h"
#include "core/status_macros.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

// Input and Parameter: the executor supplies the value (the batch, or the
// parameter's value at this step).
class SourceKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    if (ctx->source_value() == nullptr) {
      return absl::InternalError("the executor supplied no value for this source node");
    }
    const Tensor& value = *ctx->source_value();
    if (value.dims() != ctx->output_dims(0)) {
      return absl::InvalidArgumentError(absl::StrCat("the value fed is ", value.DebugString(), " but the node expects ",
                                                     DimsToString(ctx->output_dims(0))));
    }
    return ctx->SetOutput(0, value);
  }
};

class ConstKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(value_, MaterializeTensor(attrs.at("value")->tensor(), node.outputs()[0].shape));
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override { return ctx->SetOutput(0, value_); }

 private:
  Tensor value_;
};

class ForwardKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override { return ctx->SetOutput(0, ctx->input(0)); }
};

// The gradient marker: passes its input through, scaled when the parameter
// asks (a shard's gradient).
class GradientKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    scale_ = attrs.at("scale")->f();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    if (scale_ == 1.0f) return ctx->SetOutput(0, ctx->input(0));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const float* x = ctx->input(0).data<float>();
    float* out = y->data<float>();
    for (int64_t i = 0; i < y->num_elements(); ++i) out[i] = x[i] * scale_;
    return absl::OkStatus();
  }

 private:
  float scale_ = 1.0f;
};

// Flatten, Reshape, ReshapeLike: the same buffer with the inferred dims.
class ReshapeKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(Tensor y, ctx->input(0).Reshaped(ctx->output_dims(0)));
    return ctx->SetOutput(0, std::move(y));
  }
};

NEREID_REGISTER_KERNEL("Input", kCpu, DT_FLOAT, SourceKernel);
NEREID_REGISTER_KERNEL("Input", kCpu, DT_INT32, SourceKernel);
NEREID_REGISTER_KERNEL("Input", kCpu, DT_INT64, SourceKernel);
NEREID_REGISTER_KERNEL("Parameter", kCpu, DT_FLOAT, SourceKernel);
NEREID_REGISTER_KERNEL("Parameter", kCpu, DT_INT32, SourceKernel);
NEREID_REGISTER_KERNEL("Parameter", kCpu, DT_INT64, SourceKernel);
NEREID_REGISTER_KERNEL("Const", kCpu, DT_FLOAT, ConstKernel);
NEREID_REGISTER_KERNEL("Const", kCpu, DT_INT32, ConstKernel);
NEREID_REGISTER_KERNEL("Const", kCpu, DT_INT64, ConstKernel);
NEREID_REGISTER_KERNEL("Identity", kCpu, DT_FLOAT, ForwardKernel);
NEREID_REGISTER_KERNEL("Identity", kCpu, DT_INT32, ForwardKernel);
NEREID_REGISTER_KERNEL("Identity", kCpu, DT_INT64, ForwardKernel);
NEREID_REGISTER_KERNEL("Feedback", kCpu, DT_FLOAT, ForwardKernel);
NEREID_REGISTER_KERNEL("Gradient", kCpu, DT_FLOAT, GradientKernel);
NEREID_REGISTER_KERNEL("Flatten", kCpu, DT_FLOAT, ReshapeKernel);
NEREID_REGISTER_KERNEL("Reshape", kCpu, DT_FLOAT, ReshapeKernel);
NEREID_REGISTER_KERNEL("Reshape", kCpu, DT_INT32, ReshapeKernel);
NEREID_REGISTER_KERNEL("Reshape", kCpu, DT_INT64, ReshapeKernel);
NEREID_REGISTER_KERNEL("ReshapeLike", kCpu, DT_FLOAT, ReshapeKernel);

}  // namespace
}  // namespace nereid
