// 1-bit SGD's claims: each value decodes to one of its bucket's two means
// (of the non-negative and of the negative values, chosen by sign); error
// feedback loses nothing (what was sent plus the final residual equals what
// came in); the payload of 1 bit per value is about 30x smaller.

#include <algorithm>
#include <cmath>

#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::SimulatedRanks;

TEST(OneBitCodecTest, ValuesAreTheBucketMeansBySign) {
  SimulatedRanks ranks("onebit", {1050}, 1, {{"bucket", "100"}});  // a short last bucket
  std::vector<float> g = RandomGradient(1050, 1);
  std::vector<float> q = ranks.Step({g})[0];  // the residual starts at zero: x = g
  for (int begin = 0; begin < 1050; begin += 100) {
    const int n = std::min(100, 1050 - begin);
    double sum[2] = {0, 0};
    int count[2] = {0, 0};
    for (int i = 0; i < n; ++i) {
      const int negative = g[begin + i] < 0;
      sum[negative] += g[begin + i];
      ++count[negative];
    }
    ASSERT_GT(count[0], 0);
    ASSERT_GT(count[1], 0);
    for (int i = 0; i < n; ++i) {
      const int negative = g[begin + i] < 0;
      ASSERT_FLOAT_EQ(q[begin + i], sum[negative] / count[negative]) << begin + i;
    }
  }
}

TEST(OneBitCodecTest, OneSignedBucketHasZeroForTheOtherMean) {
  SimulatedRanks ranks("onebit", {4}, 1, {{"bucket", "4"}});
  EXPECT_EQ(ranks.Step({{1, 2, 3, 6}})[0], std::vector<float>({3, 3, 3, 3}));
  EXPECT_EQ(ranks.state(0)[0], std::vector<float>({-2, -1, 0, 3}));
}

TEST(OneBitCodecTest, ErrorFeedbackLosesNothing) {
  const int world = 2, steps = 25;
  const int64_t n = 3000;
  SimulatedRanks ranks("onebit", {n}, world, {{"bucket", "256"}});
  std::vector<double> in(n, 0.0), sent(n, 0.0);
  for (int t = 0; t < steps; ++t) {
    std::vector<std::vector<float>> g;
    for (int r = 0; r < world; ++r) g.push_back(RandomGradient(n, 1000 * t + r));
    std::vector<float> avg = ranks.Step(g)[0];
    for (int64_t i = 0; i < n; ++i) {
      for (int r = 0; r < world; ++r) in[i] += g[r][i];
      sent[i] += double(avg[i]) * world;
    }
  }
  double left = 0;
  for (int64_t i = 0; i < n; ++i) {
    double residual = 0;
    for (int r = 0; r < world; ++r) residual += ranks.state(r)[0][i];
    left += std::fabs(residual);
    ASSERT_NEAR(sent[i] + residual, in[i], 1e-4) << i;
  }
  EXPECT_GT(left, 0);
}

TEST(OneBitCodecTest, ResidualStaysBounded) {
  // Error feedback must not let the residual grow without bound: after many
  // steps it stays on the scale of one gradient.
  const int64_t n = 2048;
  SimulatedRanks ranks("onebit", {n}, 1);
  for (int t = 0; t < 200; ++t) ranks.Step({RandomGradient(n, t)});
  double sq = 0;
  for (float v : ranks.state(0)[0]) sq += double(v) * v;
  EXPECT_LT(std::sqrt(sq / n), 2.0);  // 0.78 measured; the gradient RMS is 1
}

TEST(OneBitCodecTest, OneBitPayloadIsAboutThirtyTimesSmaller) {
  SimulatedRanks ranks("onebit", {48000}, 1, {{"bucket", "2048"}});
  const double ratio = 48000.0 / ranks.codec(0).PayloadFloats();
  EXPECT_GT(ratio, 30.5);  // 1 bit per value plus two float32 means per 2048 values
  EXPECT_LE(ratio, 32.0);
  EXPECT_EQ(ranks.codec(0).PayloadFloats(), 23 * (2 + 64) + (2 + 28));  // 23 full buckets + 896 values
}

TEST(OneBitCodecTest, RejectsBadOptions) {
  auto codec = *CodecRegistry::Global().Create("onebit");
  for (const char* bucket : {"0", "-1", "wide", "2.5"}) {
    absl::Status s = codec->Init({10}, CodecOptions(std::map<std::string, std::string>{{"bucket", bucket}}));
    EXPECT_FALSE(s.ok()) << bucket;
    EXPECT_NE(std::string(s.message()).find("bucket"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace nereid
