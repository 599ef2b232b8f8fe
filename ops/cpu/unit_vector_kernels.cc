// UnitVector: one pass for the norm (in double, in element order, so two
// ranks holding the same x get the same bits), one to scale.

#include <cmath>

#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

class UnitVectorKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const float* in = x.data<float>();
    float* out = y->data<float>();
    double sum = 0;
    for (int64_t i = 0; i < x.num_elements(); ++i) sum += static_cast<double>(in[i]) * in[i];
    const double norm = std::sqrt(sum);
    const float scale = norm > 0 ? static_cast<float>(1.0 / norm) : 0.0f;
    for (int64_t i = 0; i < x.num_elements(); ++i) out[i] = in[i] * scale;
    return absl::OkStatus();
  }
};

NEREID_REGISTER_KERNEL("UnitVector", kCpu, DT_FLOAT, UnitVectorKernel);

}  // namespace
}  // namespace nereid
