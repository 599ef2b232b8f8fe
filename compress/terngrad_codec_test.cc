// TernGrad's claims: every value decodes to -s, 0 or s (s the bucket's
// max |x|, the sign kept), the mean over many seeds converges to the gradient
// (unbiased), and 2-bit codes are nearly 16x smaller.

#include <algorithm>
#include <cmath>

#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::SimulatedRanks;

TEST(TernGradCodecTest, ValuesAreZeroOrTheSignedBucketMaximum) {
  SimulatedRanks ranks("terngrad", {1050}, 1, {{"bucket", "100"}});  // a short last bucket
  std::vector<float> g = RandomGradient(1050, 1);
  std::vector<float> q = ranks.Step({g})[0];
  int zeros = 0;
  for (int begin = 0; begin < 1050; begin += 100) {
    const int n = std::min(100, 1050 - begin);
    float s = 0;
    for (int i = 0; i < n; ++i) s = std::max(s, std::fabs(g[begin + i]));
    for (int i = 0; i < n; ++i) {
      const float v = q[begin + i];
      if (v == 0) {
        ++zeros;
        continue;
      }
      ASSERT_EQ(std::fabs(v), s) << begin + i;
      ASSERT_EQ(std::signbit(v), std::signbit(g[begin + i])) << begin + i;
      if (std::fabs(g[begin + i]) == s) {
        ASSERT_NE(v, 0.0f) << "the bucket maximum is always kept";
      }
    }
  }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, 1050);
}

TEST(TernGradCodecTest, IsUnbiased) {
  // Var q(x_i) = s|x_i| - x_i^2 <= s^2/4: over 2000 draws the mean's standard
  // error is <= s/2/sqrt(2000); a 5-sigma bound on each of 64 values.
  const int n = 64, draws = 2000;
  std::vector<float> g = RandomGradient(n, 9);
  double s = 0;
  for (float v : g) s = std::max(s, double(std::fabs(v)));
  SimulatedRanks ranks("terngrad", {n}, 1, {{"bucket", "64"}});
  std::vector<double> mean(n, 0.0);
  for (int d = 0; d < draws; ++d) {
    std::vector<float> q = ranks.Step({g})[0];
    for (int i = 0; i < n; ++i) mean[i] += q[i] / draws;
  }
  const double bound = 5 * s / 2 / std::sqrt(double(draws));
  for (int i = 0; i < n; ++i) EXPECT_NEAR(mean[i], g[i], bound) << i;
}

TEST(TernGradCodecTest, AverageOverRanksIsOfTernaryCodes) {
  // Two ranks: each value is the mean of two values from {-s_r, 0, s_r}.
  SimulatedRanks ranks("terngrad", {10}, 2, {{"bucket", "10"}});
  std::vector<float> a(10, 0.5f), b(10, -2.0f);
  a[3] = 1.0f;  // s_0 = 1
  std::vector<float> q = ranks.Step({a, b})[0];
  for (int i = 0; i < 10; ++i) {
    const float v = q[i];
    EXPECT_TRUE(v == -1.0f || v == -0.5f) << i << ": " << v;  // b always sends -2; a sends 0 or 1
  }
}

TEST(TernGradCodecTest, TwoBitPayloadIsNearlySixteenTimesSmaller) {
  SimulatedRanks ranks("terngrad", {48000}, 1, {{"bucket", "2048"}});
  const double ratio = 48000.0 / ranks.codec(0).PayloadFloats();
  EXPECT_GT(ratio, 15.8);  // 2 bits per value plus one float32 scale per 2048 values
  EXPECT_LE(ratio, 16.0);
  EXPECT_EQ(ranks.codec(0).PayloadFloats(), 23 * (1 + 128) + (1 + 56));  // 23 full buckets + 896 values
}

TEST(TernGradCodecTest, RejectsBadOptions) {
  auto codec = *CodecRegistry::Global().Create("terngrad");
  for (const char* bucket : {"0", "-4", "many", "1.5"}) {
    absl::Status s = codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bucket", bucket}}));
    EXPECT_FALSE(s.ok()) << bucket;
    EXPECT_NE(std::string(s.message()).find("bucket"), std::string::npos) << s;
  }
  EXPECT_TRUE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bucket", "3"}})).ok());
}

}  // namespace
}  // namespace nereid
