#include "core/initializers.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/tensor_proto.h"

namespace nereid {
namespace {

constexpr double kTwoPi = 6.283185307179586;

// A uniform double in [0, 1) from 53 random bits.
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0); }

struct Fans {
  double in = 1, out = 1;
};

Fans FansOf(const std::vector<int64_t>& dims, const InitializerSpec& spec) {
  Fans f;
  if (dims.size() == 1) {
    f.in = f.out = static_cast<double>(dims[0]);
  } else if (dims.size() == 2) {
    f.in = static_cast<double>(dims[0]);
    f.out = static_cast<double>(dims[1]);
  } else if (dims.size() >= 3) {
    double receptive = 1;
    for (size_t i = 2; i < dims.size(); ++i) receptive *= static_cast<double>(dims[i]);
    f.in = static_cast<double>(dims[1]) * receptive;
    f.out = static_cast<double>(dims[0]) * receptive;
  }
  if (spec.fan_in() > 0) f.in = static_cast<double>(spec.fan_in());
  if (spec.fan_out() > 0) f.out = static_cast<double>(spec.fan_out());
  return f;
}

void FillUniform(float* out, int64_t n, double low, double high, std::mt19937_64& rng) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(low + (high - low) * Uniform01(rng));
}

// Box-Muller, two draws per pair.
void FillNormal(float* out, int64_t n, double mean, double stddev, std::mt19937_64& rng) {
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - Uniform01(rng), u2 = Uniform01(rng);
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(mean + stddev * r * std::cos(kTwoPi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(mean + stddev * r * std::sin(kTwoPi * u2));
  }
}

absl::Status FillFromSpec(const InitializerSpec& spec, Tensor* t) {
  float* out = t->data<float>();
  int64_t n = t->num_elements();
  std::mt19937_64 rng(spec.seed());
  Fans fans = FansOf(t->dims(), spec);
  const std::string& kind = spec.kind();
  if (kind == "zeros" || kind == "ones" || kind == "constant") {
    float v = kind == "zeros" ? 0.0f : kind == "ones" ? 1.0f : spec.value();
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  } else if (kind == "uniform") {
    FillUniform(out, n, spec.low(), spec.high(), rng);
  } else if (kind == "normal") {
    FillNormal(out, n, spec.mean(), spec.stddev(), rng);
  } else if (kind == "he_normal") {
    FillNormal(out, n, 0.0, std::sqrt(2.0 / fans.in), rng);
  } else if (kind == "he_uniform") {
    double limit = std::sqrt(6.0 / fans.in);
    FillUniform(out, n, -limit, limit, rng);
  } else if (kind == "glorot_normal") {
    FillNormal(out, n, 0.0, std::sqrt(2.0 / (fans.in + fans.out)), rng);
  } else if (kind == "glorot_uniform") {
    double limit = std::sqrt(6.0 / (fans.in + fans.out));
    FillUniform(out, n, -limit, limit, rng);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown initialiser '", kind, "'"));
  }
  return absl::OkStatus();
}

template <typename T, typename Values>
void CopyValues(const Values& values, Tensor* t) {
  T* out = t->data<T>();
  for (int64_t i = 0; i < t->num_elements(); ++i) out[i] = static_cast<T>(values[static_cast<int>(i)]);
}

}  // namespace

absl::StatusOr<Tensor> MaterializeTensor(const TensorProto& proto, const TensorShape& shape) {
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot materialise a tensor of unknown shape ", shape.ToString()));
  }
  ASSIGN_OR_RETURN(TensorShape checked, ValidateTensorProto(proto, &shape));
  DataType dtype = proto.dtype() == DT_INVALID ? DT_FLOAT : proto.dtype();
  ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(dtype, checked.dims()));
  if (proto.has_init()) {
    if (dtype != DT_FLOAT) {
      return absl::UnimplementedError(
          absl::StrCat("initialisers fill float32 tensors; this one is ", DataTypeName(dtype)));
    }
    RETURN_IF_ERROR(FillFromSpec(proto.init(), &t));
    return t;
  }
  if (!proto.raw_data().empty()) {
    std::memcpy(t.raw(), proto.raw_data().data(), t.num_bytes());
    return t;
  }
  switch (dtype) {
    case DT_FLOAT:
      CopyValues<float>(proto.float_val(), &t);
      break;
    case DT_DOUBLE:
      CopyValues<double>(proto.double_val(), &t);
      break;
    case DT_INT32:
      CopyValues<int32_t>(proto.int_val(), &t);
      break;
    case DT_INT64:
      CopyValues<int64_t>(proto.int64_val(), &t);
      break;
    case DT_BOOL:
      CopyValues<bool>(proto.bool_val(), &t);
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("cannot materialise values of dtype ", DataTypeName(dtype)));
  }
  return t;
}

}  // namespace nereid
