#include "comm/wire_format.h"

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
    for (size_t i = 0; i < in.size(); ++i) out[i] = ToHalf(in[i]);
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] = ToBFloat16(in[i]);
  }
}

void DecodeWire(WireType type, const uint16_t* in, absl::Span<float> out) {
  if (type == WireType::kFloat16) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = FromHalf(in[i]);
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = FromBFloat16(in[i]);
  }
}

void DecodeWireAdd(WireType type, const uint16_t* in, absl::Span<float> out) {
  if (type == WireType::kFloat16) {
    for (size_t i = 0; i < out.size(); ++i) out[i] += FromHalf(in[i]);
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] += FromBFloat16(in[i]);
  }
}

}  // namespace nereid
