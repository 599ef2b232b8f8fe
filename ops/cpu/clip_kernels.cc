// GlobalNormClipFactor: the sum of squares in double over every input (in
// input order, so the same in every run), then the factor. SquaredNorm: that
// sum alone.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cpu/cpu_util.h"

namespace nereid {
namespace {

// The sum of squares over the inputs, in double; an error names the first
// input holding a NaN or an infinity.
absl::StatusOr<double> SumOfSquares(OpKernelContext* ctx) {
  double squares = 0;
  for (int i = 0; i < ctx->num_inputs(); ++i) {
    const Tensor& t = ctx->input(i);
    const float* v = t.data<float>();
    double part = 0;
    for (int64_t k = 0; k < t.num_elements(); ++k) part += static_cast<double>(v[k]) * v[k];
    if (!std::isfinite(part)) {
      return absl::InvalidArgumentError(absl::StrCat("gradient ", i, " (", t.DebugString(),
                                                     ") holds a NaN or infinite value: its norm is ", part));
    }
    squares += part;
  }
  return squares;
}

class SquaredNormKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(double squares, SumOfSquares(ctx));
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    out->data<float>()[0] = static_cast<float>(squares);
    return absl::OkStatus();
  }
};

class GlobalNormClipFactorKernel : public OpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    max_norm_ = attrs.at("max_norm")->f();
    return absl::OkStatus();
  }

  absl::Status Compute(OpKernelContext* ctx) override {
    ASSIGN_OR_RETURN(double squares, SumOfSquares(ctx));
    const double norm = std::sqrt(squares);
    ASSIGN_OR_RETURN(Tensor * factor, ctx->AllocateOutput(0));
    ASSIGN_OR_RETURN(Tensor * norm_out, ctx->AllocateOutput(1));
    factor->data<float>()[0] = static_cast<float>(std::min(1.0, max_norm_ / (norm + 1e-6)));
    norm_out->data<float>()[0] = static_cast<float>(norm);
    return absl::OkStatus();
  }

 private:
  double max_norm_ = 1.0;
};

}  // namespace

NEREID_REGISTER_KERNEL("GlobalNormClipFactor", kCpu, DT_FLOAT, GlobalNormClipFactorKernel);
NEREID_REGISTER_KERNEL("SquaredNorm", kCpu, DT_FLOAT, SquaredNormKernel);

}  // namespace nereid
