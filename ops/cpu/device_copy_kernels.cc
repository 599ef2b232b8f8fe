// CopyToDevice and CopyToHost on the host: the executor runs every node on
// host memory today (the scheduler that runs device nodes on streams is not
// built), so each copies its input into a buffer of its own, as a copy
// between memories would, rather than sharing the input's.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

class CopyKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0, x.dtype()));
    if (y->num_bytes() != x.num_bytes()) {
      return absl::InternalError(absl::StrCat("copy of ", x.DebugString(), " into ", y->DebugString()));
    }
    if (x.num_bytes() > 0) std::memcpy(y->raw(), x.raw(), static_cast<size_t>(x.num_bytes()));
    return absl::OkStatus();
  }
};

#define NEREID_REGISTER_COPY_KERNELS(op)                        \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_FLOAT, CopyKernel);       \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_DOUBLE, CopyKernel);      \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_HALF, CopyKernel);        \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_BFLOAT16, CopyKernel);    \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_INT32, CopyKernel);       \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_INT64, CopyKernel);       \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_BOOL, CopyKernel);        \
  NEREID_REGISTER_KERNEL(op, kCpu, DT_UINT8, CopyKernel)

NEREID_REGISTER_COPY_KERNELS("CopyToDevice");
NEREID_REGISTER_COPY_KERNELS("CopyToHost");

}  // namespace
}  // namespace nereid
