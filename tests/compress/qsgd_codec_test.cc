// QSGD's claims: unbiased (the mean over many seeds converges to the
// gradient), each value within norm/s of the truth, and the payload of
// 4-bit codes near 8x smaller.

#include <cmath>

#include "tests/compress/codec_test_util.h"

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

TEST(QsgdCodecTest, FourBitPayloadIsNearlyEightTimesSmaller) {
  SimulatedRanks ranks("qsgd", {48000}, 1, {{"bits", "4"}, {"bucket", "2048"}});
  double ratio = 48000.0 / ranks.codec(0).PayloadFloats();
  EXPECT_GT(ratio, 7.9);  // 4 bits per value plus one float32 norm per 2048 values
  EXPECT_LE(ratio, 8.0);
}

TEST(QsgdCodecTest, RejectsBadOptions) {
  auto codec = *CodecRegistry::Global().Create("qsgd");
  EXPECT_FALSE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bits", "1"}})).ok());
  EXPECT_FALSE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bucket", "0"}})).ok());
  EXPECT_FALSE(codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bits", "four"}})).ok());
}

}  // namespace
}  // namespace nereid
