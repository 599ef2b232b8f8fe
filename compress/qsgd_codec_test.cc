// QSGD's claims: unbiased (the mean over many seeds converges to the
// gradient), each value within norm/s of the truth, the payload of fixed
// 4-bit codes near 8x smaller, and Elias coding the same values in fewer
// bits.

#include <cmath>
#include <cstring>

#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::SimulatedRanks;

TEST(QsgdCodecTest, ErrorIsWithinOneLevelOfTheBucketNorm) {
  SimulatedRanks ranks("qsgd", {1000}, 1, {{"bits", "4"}, {"bucket", "100"}});
  std::vector<float> g = RandomGradient(1000, 1);
  std::vector<float> q = ranks.Step({g})[0];
  for (int b = 0; b < 10; ++b) {
    double norm = 0;
    for (int i = 0; i < 100; ++i) norm += double(g[b * 100 + i]) * g[b * 100 + i];
    norm = std::sqrt(norm);
    for (int i = 0; i < 100; ++i) {
      ASSERT_LE(std::fabs(q[b * 100 + i] - g[b * 100 + i]), norm / 7 * (1 + 1e-5)) << b << " " << i;
      if (q[b * 100 + i] != 0) {
        ASSERT_EQ(std::signbit(q[b * 100 + i]), std::signbit(g[b * 100 + i]));
      }
    }
  }
}

TEST(QsgdCodecTest, IsUnbiased) {
  // 2000 draws: the mean's standard error per value is <= (norm/s)/2/sqrt(2000);
  // a 5-sigma bound on each of 64 values.
  const int n = 64, draws = 2000;
  std::vector<float> g = RandomGradient(n, 9);
  double norm = 0;
  for (float v : g) norm += double(v) * v;
  norm = std::sqrt(norm);
  SimulatedRanks ranks("qsgd", {n}, 1, {{"bits", "3"}, {"bucket", "64"}});
  std::vector<double> mean(n, 0.0);
  for (int d = 0; d < draws; ++d) {
    std::vector<float> q = ranks.Step({g})[0];
    for (int i = 0; i < n; ++i) mean[i] += q[i] / draws;
  }
  const double bound = 5 * (norm / 3) / 2 / std::sqrt(double(draws));
  for (int i = 0; i < n; ++i) EXPECT_NEAR(mean[i], g[i], bound) << i;
}

TEST(QsgdCodecTest, FixedFourBitPayloadIsNearlyEightTimesSmaller) {
  SimulatedRanks ranks("qsgd", {48000}, 1, {{"bits", "4"}, {"bucket", "2048"}, {"coding", "fixed"}});
  EXPECT_FALSE(ranks.codec(0).variable_length());
  double ratio = 48000.0 / ranks.codec(0).PayloadFloats();
  EXPECT_GT(ratio, 7.9);  // 4 bits per value plus one float32 norm per 2048 values
  EXPECT_LE(ratio, 8.0);
}

// The two codings carry the same levels (same seed, same draws), so three
// ranks end with bitwise the same average either way.
TEST(QsgdCodecTest, EliasAndFixedCodingsAverageToTheSameValues) {
  for (const char* bits : {"2", "4", "8"}) {
    SimulatedRanks elias("qsgd", {5000}, 3, {{"bits", bits}, {"coding", "elias"}});
    SimulatedRanks fixed("qsgd", {5000}, 3, {{"bits", bits}, {"coding", "fixed"}});
    ASSERT_TRUE(elias.codec(0).variable_length());
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> grads = {RandomGradient(5000, 10 + step), RandomGradient(5000, 20 + step, 3.0f),
                                               RandomGradient(5000, 30 + step, 1e-3f)};
      std::vector<std::vector<float>> a = elias.Step(grads), b = fixed.Step(grads);
      for (int r = 0; r < 3; ++r) {
        ASSERT_EQ(0, std::memcmp(a[r].data(), b[r].data(), a[r].size() * sizeof(float)))
            << "bits " << bits << " step " << step << " rank " << r;
      }
    }
  }
}

// What QSGD's paper relies on: with the bucket's L2 norm as the scale most
// levels are 0 or 1, so 4-bit QSGD (7 levels) Elias-codes a Gaussian gradient
// in about 1.6 bits per value, over 8x fewer bytes than float32 even with the
// norms and the length word; the code never exceeds PayloadFloats().
TEST(QsgdCodecTest, EliasCodesFourBitsInUnderTwoBitsPerValue) {
  const int64_t n = 48000;
  auto codec = *CodecRegistry::Global().Create("qsgd");
  ASSERT_TRUE(codec->Init({n}, CodecOptions(std::map<std::string, std::string>{{"bits", "4"}})).ok());
  auto& gather = static_cast<GatherCodec&>(*codec);
  std::vector<float> code(gather.PayloadFloats());
  gather.Encode(CodecStep(), 0, RandomGradient(n, 4), {}, absl::MakeSpan(code));
  const int64_t used = gather.UsedFloats(code);
  EXPECT_LE(used, gather.PayloadFloats());
  const double bits_per_value = 32.0 * used / n;
  EXPECT_LT(bits_per_value, 2.0);
  EXPECT_GT(bits_per_value, 1.0);  // a zero level alone costs one bit
  EXPECT_GT(static_cast<double>(n) / used, 8.0);
  // The bound is exact when every value is at the top level: with bucket 1
  // each value is its own norm, so its level is s.
  auto top = *CodecRegistry::Global().Create("qsgd");
  ASSERT_TRUE(top->Init({1000}, CodecOptions(std::map<std::string, std::string>{{"bucket", "1"}})).ok());
  auto& top_gather = static_cast<GatherCodec&>(*top);
  std::vector<float> top_code(top_gather.PayloadFloats());
  top_gather.Encode(CodecStep(), 0, RandomGradient(1000, 5), {}, absl::MakeSpan(top_code));
  EXPECT_EQ(top_gather.UsedFloats(top_code), top_gather.PayloadFloats());
}

TEST(QsgdCodecTest, RejectsBadOptions) {
  auto codec = *CodecRegistry::Global().Create("qsgd");
  EXPECT_FALSE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bits", "1"}})).ok());
  EXPECT_FALSE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bucket", "0"}})).ok());
  EXPECT_FALSE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bits", "four"}})).ok());
  absl::Status coding = codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"coding", "huffman"}}));
  EXPECT_NE(coding.message().find("elias, fixed"), std::string::npos) << coding;
}

}  // namespace
}  // namespace nereid
