// PowerSGD's claims: a gradient of rank r is reproduced, the codes sum under
// allreduce (the average is the approximation of the mean gradient), error
// feedback loses nothing over time, and the payload is (n + m) * r floats.

#include <cmath>

#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::RelativeError;
using testing_codec::SimulatedRanks;

constexpr int kResidual = 0, kQ = 1;  // State()'s order

// A B^T with A n x r, B m x r: a matrix of rank r.
std::vector<float> LowRank(int64_t n, int64_t m, int64_t r, uint64_t seed) {
  std::vector<float> a = RandomGradient(n * r, seed), b = RandomGradient(m * r, seed + 1);
  std::vector<float> g(n * m, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) {
      for (int64_t j = 0; j < r; ++j) g[i * m + k] += a[i * r + j] * b[k * r + j];
    }
  }
  return g;
}

TEST(PowerSgdCodecTest, ReproducesAGradientOfItsRank) {
  const int64_t n = 40, m = 30;
  std::vector<float> g = LowRank(n, m, 2, 5);
  SimulatedRanks ranks("powersgd", {n, 3, 10}, 2, {{"rank", "2"}});
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> out = ranks.Step({g, g});
    EXPECT_LT(RelativeError(out[0], g), 1e-3) << "step " << step;
  }
}

// The approximation of the mean gradient from Q0, computed directly in
// double: P = orth(mean Q0), Q = mean^T P, P Q^T.
std::vector<float> ApproximateMean(const std::vector<float>& mean, const std::vector<float>& q0, int64_t n, int64_t m,
                                   int64_t r) {
  std::vector<double> p(n * r, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) {
      for (int64_t j = 0; j < r; ++j) p[i * r + j] += double(mean[i * m + k]) * q0[k * r + j];
    }
  }
  testing_codec::OrthonormalizeColumns(p, n, r);
  std::vector<double> q(m * r, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) {
      for (int64_t j = 0; j < r; ++j) q[k * r + j] += double(mean[i * m + k]) * p[i * r + j];
    }
  }
  std::vector<float> out(n * m);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) {
      double v = 0;
      for (int64_t j = 0; j < r; ++j) v += p[i * r + j] * q[k * r + j];
      out[i * m + k] = static_cast<float>(v);
    }
  }
  return out;
}

TEST(PowerSgdCodecTest, AllreduceSumsTheCodes) {
  const int64_t n = 24, m = 18, r = 3;
  const int world = 3;
  std::vector<float> q0 = RandomGradient(m * r, 77);
  std::vector<std::vector<float>> grads;
  std::vector<float> mean(n * m, 0.0f);
  for (int w = 0; w < world; ++w) {
    grads.push_back(RandomGradient(n * m, 10 + w));
    for (int64_t i = 0; i < n * m; ++i) mean[i] += grads[w][i] / world;
  }
  // Every rank starts from the same warm Q0 and no residual.
  SimulatedRanks ranks("powersgd", {n, m}, world, {{"rank", "3"}});
  SimulatedRanks one("powersgd", {n, m}, 1, {{"rank", "3"}});
  for (int w = 0; w < world; ++w) ranks.state(w)[kQ] = q0;
  one.state(0)[kQ] = q0;

  std::vector<float> got = ranks.Step(grads)[0];
  std::vector<float> want = ApproximateMean(mean, q0, n, m, r);
  EXPECT_LT(RelativeError(got, want), 1e-5);
  // The same as one rank compressing the mean gradient.
  EXPECT_LT(RelativeError(got, one.Step({mean})[0]), 1e-5);
  // Q is shared; the residuals are each rank's own.
  for (int w = 1; w < world; ++w) {
    EXPECT_EQ(ranks.state(w)[kQ], ranks.state(0)[kQ]);
    EXPECT_NE(ranks.state(w)[kResidual], ranks.state(0)[kResidual]);
  }
}

TEST(PowerSgdCodecTest, ErrorFeedbackLosesNothing) {
  const int64_t n = 32, m = 20;
  SimulatedRanks ranks("powersgd", {n, m}, 1, {{"rank", "1"}});
  std::vector<double> sent(n * m, 0.0), given(n * m, 0.0);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> g = RandomGradient(n * m, 200 + step);
    std::vector<float> out = ranks.Step({g})[0];
    for (int64_t i = 0; i < n * m; ++i) {
      given[i] += g[i];
      sent[i] += out[i];
    }
  }
  const std::vector<float>& residual = ranks.state(0)[kResidual];
  for (int64_t i = 0; i < n * m; ++i) ASSERT_NEAR(sent[i] + residual[i], given[i], 1e-4) << i;
}

TEST(PowerSgdCodecTest, PayloadIsRowsPlusColumnsTimesRank) {
  SimulatedRanks ranks("powersgd", {400, 120}, 1, {{"rank", "2"}});
  EXPECT_EQ(ranks.codec(0).PayloadFloats(), (400 + 120) * 2);
  EXPECT_GT(48000.0 / ranks.codec(0).PayloadFloats(), 40.0);
  // A conv filter [out, in, kh, kw] is out x in*kh*kw.
  SimulatedRanks conv("powersgd", {64, 32, 3, 3}, 1);
  EXPECT_EQ(conv.codec(0).PayloadFloats(), (64 + 32 * 9) * 2);
}

TEST(PowerSgdCodecTest, RejectsVectorsAndBadRanks) {
  auto codec = *CodecRegistry::Global().Create("powersgd");
  absl::Status vector = codec->Init({100}, CodecOptions());
  EXPECT_EQ(vector.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(vector.message()).find("matrix"), std::string::npos) << vector;
  using Options = std::map<std::string, std::string>;
  EXPECT_FALSE(codec->Init({10, 4}, CodecOptions(Options{{"rank", "0"}})).ok());
  EXPECT_FALSE(codec->Init({10, 4}, CodecOptions(Options{{"rank", "5"}})).ok());
  EXPECT_FALSE(codec->Init({10, 4}, CodecOptions(Options{{"rank", "two"}})).ok());
  EXPECT_TRUE(codec->Init({10, 4}, CodecOptions(Options{{"rank", "4"}})).ok());
}

}  // namespace
}  // namespace nereid
