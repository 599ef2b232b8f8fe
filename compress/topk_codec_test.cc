// Top-k's claims: each rank sends exactly k values, the largest accumulated
// ones (ties to the lower index); error feedback loses nothing (what was sent
// plus what is left equals what came in); DGC momentum correction and factor
// masking match a hand-computed reference; ratio 0.01 is 50x smaller.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::SimulatedRanks;

using Options = std::map<std::string, std::string>;

// The state buffer named `name` of `rank`.
std::vector<float>& State(SimulatedRanks& ranks, int rank, const std::string& name) {
  std::vector<CodecStateSpec> specs = ranks.codec(rank).State();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return ranks.state(rank)[i];
  }
  ADD_FAILURE() << "no state " << name;
  return ranks.state(rank)[0];
}

TEST(TopKCodecTest, SendsExactlyKDistinctLargestValues) {
  const int64_t n = 1000;
  auto codec = *CodecRegistry::Global().Create("topk");
  ASSERT_TRUE(codec->Init({n}, CodecOptions(Options{{"ratio", "0.05"}, {"momentum", "0"}})).ok());
  ASSERT_EQ(codec->PayloadFloats(), 2 * 50);
  auto& gather = dynamic_cast<GatherCodec&>(*codec);
  std::vector<float> g = RandomGradient(n, 3), residual(n, 0.0f), code(codec->PayloadFloats());
  gather.Encode(CodecStep(), 0, g, {absl::MakeSpan(residual)}, absl::MakeSpan(code));

  std::vector<float> sorted(n);
  for (int64_t i = 0; i < n; ++i) sorted[i] = std::fabs(g[i]);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  std::set<uint32_t> sent;
  for (int j = 0; j < 50; ++j) {
    uint32_t i;
    std::memcpy(&i, &code[2 * j], sizeof(i));
    ASSERT_LT(i, n);
    EXPECT_EQ(code[2 * j + 1], g[i]);
    EXPECT_GE(std::fabs(g[i]), sorted[49]) << "index " << i << " is not among the top 50";
    EXPECT_EQ(residual[i], 0.0f);
    sent.insert(i);
  }
  EXPECT_EQ(sent.size(), 50u);

  std::vector<float> decoded(n, 0.0f);
  gather.DecodeAdd(code, absl::MakeSpan(decoded));
  EXPECT_EQ(std::count_if(decoded.begin(), decoded.end(), [](float v) { return v != 0; }), 50);
}

TEST(TopKCodecTest, EachRankSendsKValues) {
  // Three ranks with disjoint supports: the average has exactly 3k nonzeros.
  const int64_t n = 4800;  // k = 48
  SimulatedRanks ranks("topk", {n}, 3);
  std::vector<std::vector<float>> g(3, std::vector<float>(n, 0.0f));
  for (int r = 0; r < 3; ++r) {
    std::vector<float> x = RandomGradient(n / 3, 20 + r);
    std::copy(x.begin(), x.end(), g[r].begin() + r * (n / 3));
  }
  std::vector<float> out = ranks.Step(g)[0];
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](float v) { return v != 0; }), 3 * 48);
}

TEST(TopKCodecTest, TiesGoToTheLowerIndex) {
  SimulatedRanks ranks("topk", {8}, 1, {{"ratio", "0.25"}, {"momentum", "0"}});  // k = 2
  std::vector<float> g = {1, -3, 2, 3, -3, 0, 3, 1};
  EXPECT_EQ(ranks.Step({g})[0], std::vector<float>({0, -3, 0, 3, 0, 0, 0, 0}));
}

TEST(TopKCodecTest, ErrorFeedbackLosesNothing) {
  // m = 0: the sum of everything sent plus the final residuals equals the sum
  // of all ranks' gradients.
  const int world = 2, steps = 25;
  const int64_t n = 2000;
  SimulatedRanks ranks("topk", {n}, world, {{"ratio", "0.01"}, {"momentum", "0"}});
  ASSERT_EQ(ranks.codec(0).State().size(), 1u);  // no momentum buffer without momentum
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
    for (int r = 0; r < world; ++r) residual += State(ranks, r, "residual")[i];
    left += std::fabs(residual);
    ASSERT_NEAR(sent[i] + residual, in[i], 1e-4) << i;
  }
  EXPECT_GT(left, 0) << "something should still be waiting to be sent";
}

TEST(TopKCodecTest, MomentumCorrectionMatchesAHandComputedReference) {
  // n = 4, k = 1, m = 0.5 (exact in binary). Per step u = m*u + g, v += u,
  // the largest |v| is sent and zeroed in both u and v.
  SimulatedRanks ranks("topk", {4}, 1, {{"ratio", "0.25"}, {"momentum", "0.5"}});
  ASSERT_EQ(ranks.codec(0).State().size(), 2u);
  // Step 1: u = v = [1, -2, .5, .25]; send v[1] = -2.
  EXPECT_EQ(ranks.Step({{1, -2, 0.5, 0.25}})[0], std::vector<float>({0, -2, 0, 0}));
  EXPECT_EQ(State(ranks, 0, "momentum"), std::vector<float>({1, 0, 0.5, 0.25}));
  EXPECT_EQ(State(ranks, 0, "residual"), std::vector<float>({1, 0, 0.5, 0.25}));
  // Step 2: u = [1.5, 1, -.75, .125], v = [2.5, 1, -.25, .375]; send v[0].
  EXPECT_EQ(ranks.Step({{1, 1, -1, 0}})[0], std::vector<float>({2.5, 0, 0, 0}));
  EXPECT_EQ(State(ranks, 0, "momentum"), std::vector<float>({0, 1, -0.75, 0.125}));
  EXPECT_EQ(State(ranks, 0, "residual"), std::vector<float>({0, 1, -0.25, 0.375}));
  // Step 3: u = [0, .5, -2.375, .5625], v = [0, 1.5, -2.625, .9375]; send v[2].
  EXPECT_EQ(ranks.Step({{0, 0, -2, 0.5}})[0], std::vector<float>({0, 0, -2.625, 0}));
  EXPECT_EQ(State(ranks, 0, "momentum"), std::vector<float>({0, 0.5, 0, 0.5625}));
  EXPECT_EQ(State(ranks, 0, "residual"), std::vector<float>({0, 1.5, 0, 0.9375}));
}

TEST(TopKCodecTest, PayloadAtOnePercentIsFiftyTimesSmaller) {
  SimulatedRanks ranks("topk", {48000}, 1);  // default ratio 0.01: k = 480 pairs
  EXPECT_EQ(ranks.codec(0).PayloadFloats(), 960);
  EXPECT_DOUBLE_EQ(48000.0 / ranks.codec(0).PayloadFloats(), 50.0);
}

TEST(TopKCodecTest, KIsRoundedUpAndAtLeastOne) {
  auto codec = *CodecRegistry::Global().Create("topk");
  ASSERT_TRUE(codec->Init({100}, CodecOptions(Options{{"ratio", "0.07"}})).ok());
  EXPECT_EQ(codec->PayloadFloats(), 2 * 7);  // 0.07 * 100 is 7.000000000000001 in double
  ASSERT_TRUE(codec->Init({100}, CodecOptions(Options{{"ratio", "0.071"}})).ok());
  EXPECT_EQ(codec->PayloadFloats(), 2 * 8);
  ASSERT_TRUE(codec->Init({10}, CodecOptions(Options{{"ratio", "0.001"}})).ok());
  EXPECT_EQ(codec->PayloadFloats(), 2);
  ASSERT_TRUE(codec->Init({10}, CodecOptions(Options{{"ratio", "1"}})).ok());
  EXPECT_EQ(codec->PayloadFloats(), 20);
}

TEST(TopKCodecTest, RejectsBadOptions) {
  auto codec = *CodecRegistry::Global().Create("topk");
  for (const char* ratio : {"0", "-0.1", "1.5", "few", "nan"}) {
    absl::Status s = codec->Init({10}, CodecOptions(Options{{"ratio", ratio}}));
    EXPECT_FALSE(s.ok()) << ratio;
    EXPECT_NE(std::string(s.message()).find("ratio"), std::string::npos) << s;
  }
  for (const char* momentum : {"-0.1", "1", "1.5", "high"}) {
    absl::Status s = codec->Init({10}, CodecOptions(Options{{"momentum", momentum}}));
    EXPECT_FALSE(s.ok()) << momentum;
    EXPECT_NE(std::string(s.message()).find("momentum"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace nereid
