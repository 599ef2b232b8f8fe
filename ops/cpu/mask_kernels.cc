// CausalMask over [outer, Tq, Tk] views: each row q keeps its first
// q + Tk - Tq + 1 scores and sets the rest to `value`.

#include <algorithm>

#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

class CausalMaskKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    value_ = attrs.at("value")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0));
    const int64_t queries = x.dim(x.rank() - 2), keys = x.dim(x.rank() - 1);
    if (queries == 0 || keys == 0) return absl::OkStatus();
    const int64_t rows = x.num_elements() / keys;
    const float* in = x.data<float>();
    float* out = y->data<float>();
    cpu::ParallelFor(ctx, rows, std::max<int64_t>(1, cpu::kElementwiseGrain / keys), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t kept = std::min(keys, r % queries + keys - queries + 1);
        std::copy_n(in + r * keys, kept, out + r * keys);
        std::fill(out + r * keys + kept, out + (r + 1) * keys, value_);
      }
    });
    return absl::OkStatus();
  }

 private:
  float value_ = 0.0f;
};

}  // namespace

NEREID_REGISTER_KERNEL("CausalMask", kCpu, DT_FLOAT, CausalMaskKernel);

}  // namespace nereid
