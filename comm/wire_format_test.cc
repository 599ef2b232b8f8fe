#include "comm/wire_format.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace {

float RoundTrip(WireType type, float x) {
  uint16_t bits;
  float out;
  EncodeWire(type, absl::MakeConstSpan(&x, 1), &bits);
  DecodeWire(type, &bits, absl::MakeSpan(&out, 1));
  return out;
}

TEST(WireFormatTest, NamesParseAndSizes) {
  for (WireType t : {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16}) {
    EXPECT_EQ(*ParseWireType(WireTypeName(t)), t);
  }
  EXPECT_EQ(WireBytesPerElement(WireType::kFloat32), 4);
  EXPECT_EQ(WireBytesPerElement(WireType::kFloat16), 2);
  EXPECT_EQ(WireBytesPerElement(WireType::kBFloat16), 2);
  EXPECT_FALSE(ParseWireType("fp8").ok());
}

// Relative error at most half an ulp: 2^-11 for fp16 (normal range), 2^-8
// for bf16; representable values come back exactly.
TEST(WireFormatTest, RoundToNearestWithinHalfAnUlp) {
  for (float x = -1000.0f; x < 1000.0f; x += 0.37f) {
    EXPECT_LE(std::fabs(RoundTrip(WireType::kFloat16, x) - x), std::fabs(x) * 0x1p-11f + 0x1p-24f) << x;
    EXPECT_LE(std::fabs(RoundTrip(WireType::kBFloat16, x) - x), std::fabs(x) * 0x1p-8f) << x;
  }
  for (float exact : {0.0f, 1.0f, -2.5f, 0.09375f, 65504.0f}) EXPECT_EQ(RoundTrip(WireType::kFloat16, exact), exact);
  for (float exact : {0.0f, 1.0f, -2.5f, 0.09375f, 0x1p100f}) {
    EXPECT_EQ(RoundTrip(WireType::kBFloat16, exact), exact);
  }
  // Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 in fp16;
  // 1 + 2^-8 halfway between 1 and 1 + 2^-7 in bf16.
  EXPECT_EQ(RoundTrip(WireType::kFloat16, 1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(RoundTrip(WireType::kBFloat16, 1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(RoundTrip(WireType::kBFloat16, 1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
}

// Overflow and NaN are never hidden: the trainer's check still sees them.
TEST(WireFormatTest, OverflowBecomesInfinityAndNaNStaysNaN) {
  EXPECT_TRUE(std::isinf(RoundTrip(WireType::kFloat16, 1e6f)));
  EXPECT_TRUE(std::isinf(RoundTrip(WireType::kBFloat16, std::numeric_limits<float>::infinity())));
  EXPECT_NEAR(RoundTrip(WireType::kBFloat16, 1e30f), 1e30f, 1e30f * 0x1p-8f);  // float32's range
  EXPECT_TRUE(std::isnan(RoundTrip(WireType::kFloat16, std::nanf(""))));
  EXPECT_TRUE(std::isnan(RoundTrip(WireType::kBFloat16, std::nanf(""))));
}

TEST(WireFormatTest, DecodeAddAccumulatesInFloat32) {
  std::vector<float> in = {1.5f, -2.0f, 0.25f}, acc = {10.0f, 10.0f, 10.0f};
  std::vector<uint16_t> wire(in.size());
  EncodeWire(WireType::kFloat16, in, wire.data());
  DecodeWireAdd(WireType::kFloat16, wire.data(), absl::MakeSpan(acc));
  EXPECT_EQ(acc, (std::vector<float>{11.5f, 8.0f, 10.25f}));
}

// The vector path (8 at a time, where the CPU has F16C) and the scalar one
// (the tail, and CPUs without it) give the same bits: every float16 decoded,
// and floats of every exponent encoded, subnormals, halfway cases and
// overflow included, compared with the compiler's own conversion. A length
// that is not a multiple of 8 sends the last values down the scalar path.
TEST(WireFormatTest, EveryHalfAndEveryExponentConvertsAsTheCompilerDoes) {
  std::vector<uint16_t> halves(65536 + 3);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  std::vector<float> decoded(halves.size()), summed(halves.size(), 1.0f);
  DecodeWire(WireType::kFloat16, halves.data(), absl::MakeSpan(decoded));
  DecodeWireAdd(WireType::kFloat16, halves.data(), absl::MakeSpan(summed));
  for (size_t i = 0; i < halves.size(); ++i) {
    _Float16 h;
    std::memcpy(&h, &halves[i], sizeof h);
    const float want = static_cast<float>(h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(decoded[i])) << i;
      continue;
    }
    ASSERT_EQ(decoded[i], want) << "half bits " << i;
    ASSERT_EQ(summed[i], 1.0f + want) << "half bits " << i;
  }
  std::mt19937 random(7);
  std::vector<float> floats;
  for (int i = 0; i < 200003; ++i) {
    uint32_t bits = random();
    // Half the values near float16's range (exponents 2^-30..2^17), where it rounds.
    if (i % 2 == 0) bits = (bits & 0x807fffffu) | ((97u + random() % 48u) << 23);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    floats.push_back(x);
  }
  for (float tie : {1.0f + 0x1p-11f, 0x1p-25f, 3 * 0x1p-25f, 65520.0f, -0.0f}) floats.push_back(tie);
  std::vector<uint16_t> encoded(floats.size());
  EncodeWire(WireType::kFloat16, floats, encoded.data());
  for (size_t i = 0; i < floats.size(); ++i) {
    const _Float16 h = static_cast<_Float16>(floats[i]);
    uint16_t want;
    std::memcpy(&want, &h, sizeof want);
    if (std::isnan(floats[i])) {
      EXPECT_EQ(encoded[i] & 0x7c00u, 0x7c00u) << i;  // a NaN stays a NaN
      EXPECT_NE(encoded[i] & 0x03ffu, 0u) << i;
      continue;
    }
    ASSERT_EQ(encoded[i], want) << "float " << floats[i];
  }
}

}  // namespace
}  // namespace nereid
