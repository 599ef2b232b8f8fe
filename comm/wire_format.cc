#include "comm/wire_format.h"

#include <immintrin.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace {

// GCC's _Float16 (x86-64, GCC >= 12) converts with correct rounding.
uint16_t ToHalf(float x) {
  _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float FromHalf(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof bits);
  return static_cast<float>(h);
}

// bf16 is float32's upper half; round to nearest even on the dropped bits.
uint16_t ToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float FromBFloat16(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}

// F16C converts 8 values per instruction, with the same round-to-nearest-even
// as the scalar cast. The scalar cast is libgcc's soft-float routine: about
// 90 ns per value when the value is a float16 subnormal, as many gradients are,
// which made the 16-bit ring slower than float32's on a 45 Mbit/s link.
bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

__attribute__((target("avx,f16c"))) size_t EncodeHalfF16c(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}

// out = decoded (add: out += decoded); returns how many values it did.
template <bool add>
__attribute__((target("avx,f16c"))) size_t DecodeHalfF16c(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    if (add) x = _mm256_add_ps(_mm256_loadu_ps(out + i), x);
    _mm256_storeu_ps(out + i, x);
  }
  return i;
}

}  // namespace

absl::string_view WireTypeName(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return "float32";
    case WireType::kFloat16:
      return "float16";
    case WireType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

absl::StatusOr<WireType> ParseWireType(absl::string_view name) {
  for (WireType t : {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16}) {
    if (name == WireTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not a wire format; use float32, float16 or bfloat16"));
}

int WireBytesPerElement(WireType type) { return type == WireType::kFloat32 ? 4 : 2; }

void EncodeWire(WireType type, absl::Span<const float> in, uint16_t* out) {
  if (type == WireType::kFloat16) {
    size_t i = HasF16c() ? EncodeHalfF16c(in.data(), in.size(), out) : 0;
    for (; i < in.size(); ++i) out[i] = ToHalf(in[i]);
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] = ToBFloat16(in[i]);
  }
}

void DecodeWire(WireType type, const uint16_t* in, absl::Span<float> out) {
  if (type == WireType::kFloat16) {
    size_t i = HasF16c() ? DecodeHalfF16c<false>(in, out.size(), out.data()) : 0;
    for (; i < out.size(); ++i) out[i] = FromHalf(in[i]);
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = FromBFloat16(in[i]);
  }
}

void DecodeWireAdd(WireType type, const uint16_t* in, absl::Span<float> out) {
  if (type == WireType::kFloat16) {
    size_t i = HasF16c() ? DecodeHalfF16c<true>(in, out.size(), out.data()) : 0;
    for (; i < out.size(); ++i) out[i] += FromHalf(in[i]);
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] += FromBFloat16(in[i]);
  }
}

}  // namespace nereid
