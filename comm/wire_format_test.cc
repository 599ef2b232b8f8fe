#include "comm/wire_format.h"

#include <cmath>
#include <cstdint>
#include <limits>
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

}  // namespace
}  // namespace nereid
