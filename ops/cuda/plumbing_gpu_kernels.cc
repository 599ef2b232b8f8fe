// GPU kernels that move no arithmetic: Const, values passed through
// (Identity, Gradient) and reshapes. On the host these share their input's
// buffer; a device node's outputs are allocated before it runs (the stream
// scheduler hands them to consumers ahead of the work), so here they are a
// device-to-device copy on the node's stream.

#include "absl/strings/str_cat.h"
#include "core/initializers.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/cuda/gpu_math.h"

namespace nereid {
namespace {

class ConstGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(value_, MaterializeTensor(attrs.at("value")->tensor(), node.outputs()[0].shape));
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0, value_.dtype()));
    if (y->num_bytes() != value_.num_bytes()) {
      return absl::InternalError(absl::StrCat("Const '", ctx->node().name(), "' holds ", value_.DebugString(),
                                              " for an output of ", y->DebugString()));
    }
    if (y->num_bytes() == 0) return absl::OkStatus();
    // value_ is the kernel's, alive for the run: the asynchronous copy may
    // read it after Compute returns.
    return cuda::CudaStatus(cudaMemcpyAsync(y->raw(), value_.raw(), value_.num_bytes(), cudaMemcpyHostToDevice, stream),
                            absl::StrCat("Const '", ctx->node().name(), "': cudaMemcpyAsync"));
  }

 private:
  Tensor value_;
};

// Identity, Flatten, Reshape, ReshapeLike: the input's bytes in the output.
class CopyGpuKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0, x.dtype()));
    if (y->num_bytes() != x.num_bytes()) {
      return absl::InternalError(absl::StrCat("'", ctx->node().name(), "' copies ", x.DebugString(), " into ",
                                              y->DebugString()));
    }
    return cuda::CopyOnStream(y->raw(), x.raw(), x.num_bytes(), stream, absl::StrCat("'", ctx->node().name(), "'"));
  }
};

// The gradient marker: its input, scaled when the parameter asks (a shard's).
class GradientGpuKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    scale_ = attrs.at("scale")->f();
    return absl::OkStatus();
  }
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(*ctx));
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    if (scale_ == 1.0f) {
      return cuda::CopyOnStream(y->raw(), x.raw(), x.num_bytes(), stream, absl::StrCat("'", ctx->node().name(), "'"));
    }
    if (y->num_elements() == 0) return absl::OkStatus();
    return cuda::Launched(cuda::math::Scale(x.data<float>(), scale_, y->data<float>(), y->num_elements(), stream),
                          *ctx);
  }

 private:
  float scale_ = 1.0f;
};

NEREID_REGISTER_KERNEL("Const", kGpu, DT_FLOAT, ConstGpuKernel);
NEREID_REGISTER_KERNEL("Const", kGpu, DT_INT32, ConstGpuKernel);
NEREID_REGISTER_KERNEL("Const", kGpu, DT_INT64, ConstGpuKernel);
NEREID_REGISTER_KERNEL("Identity", kGpu, DT_FLOAT, CopyGpuKernel);
NEREID_REGISTER_KERNEL("Identity", kGpu, DT_INT32, CopyGpuKernel);
NEREID_REGISTER_KERNEL("Identity", kGpu, DT_INT64, CopyGpuKernel);
// A group's identity forward (its gradient is the group's allreduce).
NEREID_REGISTER_KERNEL("GroupIdentity", kGpu, DT_FLOAT, CopyGpuKernel);
NEREID_REGISTER_KERNEL("Gradient", kGpu, DT_FLOAT, GradientGpuKernel);
NEREID_REGISTER_KERNEL("Flatten", kGpu, DT_FLOAT, CopyGpuKernel);
NEREID_REGISTER_KERNEL("Reshape", kGpu, DT_FLOAT, CopyGpuKernel);
NEREID_REGISTER_KERNEL("Reshape", kGpu, DT_INT32, CopyGpuKernel);
NEREID_REGISTER_KERNEL("Reshape", kGpu, DT_INT64, CopyGpuKernel);
NEREID_REGISTER_KERNEL("ReshapeLike", kGpu, DT_FLOAT, CopyGpuKernel);

}  // namespace
}  // namespace nereid
