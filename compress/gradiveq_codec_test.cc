// GradiVeQ's claims: with a shared basis U the coefficients sum under
// allreduce (the average is U U^T of the mean gradient), the learned basis
// captures gradients whose slices span k dimensions, the eigen solver finds a
// known covariance's top eigenvectors, error feedback loses nothing, and the
// payload is slice / k times smaller.

#include <cmath>

#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::RelativeError;
using testing_codec::SimulatedRanks;
using Options = std::map<std::string, std::string>;

constexpr int kCovariance = 0, kBasis = 1, kResidual = 2;  // State()'s order

bool AllZero(const std::vector<float>& v) {
  for (float x : v) {
    if (x != 0.0f) return false;
  }
  return true;
}

// A random n x k matrix with orthonormal columns (row-major), in double.
std::vector<double> Orthonormal(int64_t n, int64_t k, uint64_t seed) {
  std::vector<float> r = RandomGradient(n * k, seed);
  std::vector<double> u(r.begin(), r.end());
  testing_codec::OrthonormalizeColumns(u, n, k);
  return u;
}

TEST(GradiVeqCodecTest, AllreduceSumsTheCoefficients) {
  const int64_t n = 1000, slice = 64, k = 8;  // 16 slices, the last 40 values
  const int world = 3;
  std::vector<double> u = Orthonormal(slice, k, 3);
  SimulatedRanks ranks("gradiveq", {n}, world, {{"error_feedback", "1"}});
  std::vector<std::vector<float>> grads;
  std::vector<double> mean(n, 0.0);
  for (int w = 0; w < world; ++w) {
    grads.push_back(RandomGradient(n, 40 + w));
    for (int64_t i = 0; i < n; ++i) mean[i] += double(grads[w][i]) / world;
    ranks.state(w)[kBasis].assign(u.begin(), u.end());
  }
  ranks.set_step(21);  // past the default warm-up of 20, not a refresh step
  std::vector<float> got = ranks.Step(grads)[0];

  // U U^T on each zero-padded slice of the mean, truncated.
  std::vector<float> want(n);
  for (int64_t begin = 0; begin < n; begin += slice) {
    const int64_t len = std::min(slice, n - begin);
    std::vector<double> c(k, 0.0);
    for (int64_t i = 0; i < len; ++i) {
      for (int64_t j = 0; j < k; ++j) c[j] += u[i * k + j] * mean[begin + i];
    }
    for (int64_t i = 0; i < len; ++i) {
      double v = 0;
      for (int64_t j = 0; j < k; ++j) v += u[i * k + j] * c[j];
      want[begin + i] = static_cast<float>(v);
    }
  }
  EXPECT_LT(RelativeError(got, want), 1e-5);
  // Basis and covariance are shared; residuals are each rank's own.
  for (int w = 1; w < world; ++w) {
    EXPECT_EQ(ranks.state(w)[kBasis], ranks.state(0)[kBasis]);
    EXPECT_EQ(ranks.state(w)[kCovariance], ranks.state(0)[kCovariance]);
    EXPECT_NE(ranks.state(w)[kResidual], ranks.state(0)[kResidual]);
  }
}

TEST(GradiVeqCodecTest, LearnsASubspaceTheSlicesLieIn) {
  const int64_t slice = 16, k = 4, n = slice * 50;
  const int world = 2;
  std::vector<float> b = RandomGradient(slice * k, 11);  // the subspace's spanning vectors
  auto gradient = [&](uint64_t seed) {
    std::vector<float> c = RandomGradient(n / slice * k, seed), g(n, 0.0f);
    for (int64_t s = 0; s < n / slice; ++s) {
      for (int64_t i = 0; i < slice; ++i) {
        for (int64_t j = 0; j < k; ++j) g[s * slice + i] += b[i * k + j] * c[s * k + j];
      }
    }
    return g;
  };
  SimulatedRanks ranks("gradiveq", {n}, world,
                       {{"slice", "16"}, {"coefficients", "4"}, {"refresh", "3"}, {"warmup", "3"}});
  for (int step = 0; step < 8; ++step) {  // exact 0..2 (the first basis after 2), 3 and 6; compressed 4, 5, 7
    std::vector<std::vector<float>> grads = {gradient(100 + 2 * step), gradient(101 + 2 * step)};
    std::vector<float> mean(n);
    for (int64_t i = 0; i < n; ++i) mean[i] = (grads[0][i] + grads[1][i]) / world;
    std::vector<float> out = ranks.Step(grads)[0];
    EXPECT_EQ(AllZero(ranks.state(0)[kBasis]), step < 2) << step;
    EXPECT_LT(RelativeError(out, mean), 1e-4) << "step " << step;
  }
}

TEST(GradiVeqCodecTest, BasisIsTheTopEigenvectorsOfTheCovariance) {
  const int64_t slice = 16, k = 4;
  // R diag(16, 15, ..., 1) R^T with R a random rotation.
  std::vector<double> r = Orthonormal(slice, slice, 21);
  std::vector<float> covariance(slice * slice);
  for (int64_t i = 0; i < slice; ++i) {
    for (int64_t j = 0; j < slice; ++j) {
      double v = 0;
      for (int64_t l = 0; l < slice; ++l) v += r[i * slice + l] * double(slice - l) * r[j * slice + l];
      covariance[i * slice + j] = static_cast<float>(v);
    }
  }
  SimulatedRanks ranks("gradiveq", {slice * 10}, 1, {{"slice", "16"}, {"coefficients", "4"}, {"warmup", "5"}});
  ranks.state(0)[kCovariance] = covariance;
  ranks.set_step(5);  // the first basis is due
  ranks.Step({std::vector<float>(slice * 10, 0.0f)});
  const std::vector<float>& basis = ranks.state(0)[kBasis];
  for (int64_t j = 0; j < k; ++j) {
    double dot = 0, norm = 0;
    for (int64_t i = 0; i < slice; ++i) {
      dot += basis[i * k + j] * r[i * slice + j];
      norm += double(basis[i * k + j]) * basis[i * k + j];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5) << j;
    EXPECT_NEAR(std::fabs(dot), 1.0, 1e-5) << "eigenvector " << j;
  }
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t l = 0; l < j; ++l) {
      double dot = 0;
      for (int64_t i = 0; i < slice; ++i) dot += double(basis[i * k + j]) * basis[i * k + l];
      EXPECT_NEAR(dot, 0.0, 1e-5) << j << " " << l;
    }
  }
  // The covariance is kept for later refreshes (a zero gradient adds nothing).
  EXPECT_EQ(ranks.state(0)[kCovariance], covariance);
}

TEST(GradiVeqCodecTest, ErrorFeedbackLosesNothing) {
  const int64_t n = 300;
  SimulatedRanks ranks("gradiveq", {n}, 1,
                       {{"slice", "32"}, {"coefficients", "4"}, {"refresh", "3"}, {"warmup", "2"}, {"error_feedback", "1"}});
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  for (int step = 0; step < 6; ++step) {  // exact 0, 1 and 3; compressed 2, 4 and 5
    std::vector<float> g = RandomGradient(n, 300 + step);
    std::vector<float> out = ranks.Step({g})[0];
    for (int64_t i = 0; i < n; ++i) {
      given[i] += g[i];
      sent[i] += out[i];
    }
  }
  ASSERT_FALSE(AllZero(ranks.state(0)[kBasis]));
  const std::vector<float>& residual = ranks.state(0)[kResidual];
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(sent[i] + residual[i], given[i], 1e-4) << i;

  SimulatedRanks without("gradiveq", {n}, 1);
  EXPECT_EQ(without.codec(0).State().size(), 2u);  // no residual by default
  EXPECT_TRUE(without.codec(0).Suits({8, 4, 3, 3}));
  EXPECT_FALSE(without.codec(0).Suits({400, 120}));
}

TEST(GradiVeqCodecTest, PayloadIsSliceOverCoefficientsSmaller) {
  SimulatedRanks ranks("gradiveq", {64 * 100}, 1);
  EXPECT_EQ(ranks.codec(0).PayloadFloats(), 100 * 8);
  EXPECT_DOUBLE_EQ(6400.0 / ranks.codec(0).PayloadFloats(), 8.0);
  SimulatedRanks padded("gradiveq", {1000}, 1);
  EXPECT_EQ(padded.codec(0).PayloadFloats(), 16 * 8);  // ceil(1000 / 64) slices
}

TEST(GradiVeqCodecTest, RejectsBadOptions) {
  auto codec = *CodecRegistry::Global().Create("gradiveq");
  for (const Options& bad :
       {Options{{"coefficients", "65"}}, Options{{"slice", "4"}, {"coefficients", "5"}}, Options{{"slice", "0"}},
        Options{{"slice", "257"}}, Options{{"refresh", "0"}}, Options{{"warmup", "0"}},
        Options{{"error_feedback", "2"}}, Options{{"coefficients", "many"}}}) {
    absl::Status s = codec->Init({1000}, CodecOptions(bad));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << CodecOptions(bad).ToString();
    EXPECT_NE(std::string(s.message()).find(bad.begin()->first), std::string::npos) << s;
  }
  EXPECT_TRUE(codec->Init({1000}, CodecOptions(Options{{"slice", "4"}})).ok());  // coefficients default to 4
}

}  // namespace
}  // namespace nereid
