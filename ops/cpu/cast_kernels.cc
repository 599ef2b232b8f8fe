// Cast between float32, int32 and int64: one kernel per output type, reading
// any of the three. Float to integer truncates toward zero (ONNX's rule); a
// value outside the integer's range is refused rather than wrapped.

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

template <typename To, typename From>
absl::Status Convert(const From* in, To* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
      const From v = std::trunc(in[i]);
      // The integer's range in float: [min, -min) holds exactly.
      if (!(v >= -std::ldexp(From{1}, std::numeric_limits<To>::digits) &&
            v < std::ldexp(From{1}, std::numeric_limits<To>::digits))) {
        return absl::InvalidArgumentError(absl::StrCat("element ", i, " (", in[i], ") does not fit the integer type"));
      }
    } else if constexpr (std::is_integral_v<To> && sizeof(To) < sizeof(From)) {
      if (in[i] < std::numeric_limits<To>::min() || in[i] > std::numeric_limits<To>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("element ", i, " (", in[i], ") does not fit int32"));
      }
    }
    out[i] = static_cast<To>(in[i]);
  }
  return absl::OkStatus();
}

template <typename To>
class CastKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ASSIGN_OR_RETURN(Tensor * y, ctx->AllocateOutput(0, ctx->node().outputs()[0].dtype));
    To* out = y->data<To>();
    const int64_t n = x.num_elements();
    switch (x.dtype()) {
      case DT_FLOAT:
        return Convert(x.data<float>(), out, n);
      case DT_INT32:
        return Convert(x.data<int32_t>(), out, n);
      case DT_INT64:
        return Convert(x.data<int64_t>(), out, n);
      default:
        return absl::InvalidArgumentError(absl::StrCat("cannot cast ", DataTypeName(x.dtype())));
    }
  }
};

}  // namespace

NEREID_REGISTER_KERNEL("Cast", kCpu, DT_FLOAT, CastKernel<float>);
NEREID_REGISTER_KERNEL("Cast", kCpu, DT_INT32, CastKernel<int32_t>);
NEREID_REGISTER_KERNEL("Cast", kCpu, DT_INT64, CastKernel<int64_t>);

}  // namespace nereid
