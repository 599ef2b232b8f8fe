// Square root, reciprocal, exp, log, negation and erf, and their gradients,
// as vectorisable loops.

#include <cmath>

#include "ops/cpu/elementwise_loops.h"

namespace nereid {
namespace {

struct Sqrt {
  static float Apply(float x) { return std::sqrt(x); }
};
struct SqrtGrad {
  static float Apply(float dy, float y) { return dy * 0.5f / y; }
};
struct Reciprocal {
  static float Apply(float x) { return 1 / x; }
};
struct ReciprocalGrad {
  static float Apply(float dy, float y) { return -dy * y * y; }
};
struct Exp {
  static float Apply(float x) { return std::exp(x); }
};
struct ExpGrad {
  static float Apply(float dy, float y) { return dy * y; }
};
struct Log {
  static float Apply(float x) { return std::log(x); }
};
struct LogGrad {
  static float Apply(float dy, float x) { return dy / x; }
};
struct Neg {
  static float Apply(float x) { return -x; }
};
struct Erf {
  static float Apply(float x) { return std::erf(x); }
};
struct ErfGrad {
  static float Apply(float dy, float x) { return dy * static_cast<float>(M_2_SQRTPI) * std::exp(-x * x); }
};

using cpu::UnaryGradKernel;
using cpu::UnaryKernel;

NEREID_REGISTER_KERNEL("Sqrt", kCpu, DT_FLOAT, UnaryKernel<Sqrt>);
NEREID_REGISTER_KERNEL("SqrtGrad", kCpu, DT_FLOAT, UnaryGradKernel<SqrtGrad>);
NEREID_REGISTER_KERNEL("Reciprocal", kCpu, DT_FLOAT, UnaryKernel<Reciprocal>);
NEREID_REGISTER_KERNEL("ReciprocalGrad", kCpu, DT_FLOAT, UnaryGradKernel<ReciprocalGrad>);
NEREID_REGISTER_KERNEL("Exp", kCpu, DT_FLOAT, UnaryKernel<Exp>);
NEREID_REGISTER_KERNEL("ExpGrad", kCpu, DT_FLOAT, UnaryGradKernel<ExpGrad>);
NEREID_REGISTER_KERNEL("Log", kCpu, DT_FLOAT, UnaryKernel<Log>);
NEREID_REGISTER_KERNEL("LogGrad", kCpu, DT_FLOAT, UnaryGradKernel<LogGrad>);
NEREID_REGISTER_KERNEL("Neg", kCpu, DT_FLOAT, UnaryKernel<Neg>);
NEREID_REGISTER_KERNEL("Erf", kCpu, DT_FLOAT, UnaryKernel<Erf>);
NEREID_REGISTER_KERNEL("ErfGrad", kCpu, DT_FLOAT, UnaryGradKernel<ErfGrad>);

}  // namespace
}  // namespace nereid
