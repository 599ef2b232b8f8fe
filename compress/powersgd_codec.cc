// PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank
// Gradient Compression for Distributed Optimization", NeurIPS 2019): one step
// of subspace (power) iteration per training step, warm-started from the last
// step's Q, with error feedback.
//
// A gradient of dims [d0, d1, ...] is the matrix M of n = d0 rows and
// m = d1 * d2 * ... columns (a conv filter [out, in, kh, kw] is out x in*kh*kw).
// With M = gradient + residual and Q (m x r) shared by every rank, a step
// is two rounds of one allreduce each:
//
//   round 0: P = M Q;    allreduce P, / world;  orthonormalise P's columns
//   round 1: Q = M^T P;  allreduce Q, / world   (Q is kept: the warm start)
//            average = P Q^T;  residual = M - P Q^T
//
// M is built in the residual's place in round 0; P is kept by the codec
// between the rounds.
//
// Both products are linear in M, so allreduce sums the ranks' P and Q as it
// would sum the gradients: the average is the rank-r approximation of the
// mean M. The residual is M less the average, as in PyTorch's
// powerSGD_hook. One rank sends (n + m) * r floats instead of n * m.

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compress/codec.h"
#include "compress/orthonormalise.h"
#include "compress/powersgd_steps.h"

namespace nereid {
namespace {

class PowerSgdCodec : public GradientCodec {
 public:
  absl::Status Init(const std::vector<int64_t>& dims, const CodecOptions& o) override {
    if (dims.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("powersgd needs a matrix (a gradient of 2 or more dims); got [",
                                                     absl::StrJoin(dims, ", "), "]"));
    }
    rows_ = dims[0];
    cols_ = 1;
    for (size_t i = 1; i < dims.size(); ++i) cols_ *= dims[i];
    if (rows_ < 1 || cols_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("powersgd: the gradient [", absl::StrJoin(dims, ", "), "] is empty"));
    }
    const int64_t most = std::min(rows_, cols_);
    absl::StatusOr<int64_t> rank = o.Integer("rank", std::min<int64_t>(2, most), 1, most);
    if (!rank.ok()) return rank.status();
    rank_ = *rank;
    return absl::OkStatus();
  }

  CodecCollective collective() const override { return CodecCollective::kAllReduce; }

  std::vector<CodecStateSpec> State() const override {
    return {{"residual", {rows_, cols_}, /*per_rank=*/true}, {"q", {cols_, rank_}, /*per_rank=*/false}};
  }

  int64_t PayloadFloats() const override { return (rows_ + cols_) * rank_; }

  // Round 0 sends P = M Q (n * r floats), round 1 Q = M^T P (m * r floats).
  int Rounds() const override { return 2; }

  int64_t RoundFloats(const CodecStep&, int round, const std::vector<absl::Span<float>>&) const override {
    return (round == 0 ? rows_ : cols_) * rank_;
  }

  void Contribute(const CodecStep& step, int round, int, absl::Span<const float> gradient,
                  const std::vector<absl::Span<float>>& state, absl::Span<float> out) override {
    const int64_t n = rows_, m = cols_, r = rank_;
    absl::Span<float> mat = state[0];
    absl::Span<float> q = state[1];
    if (round == 0) {
      // M = gradient + residual, built in the residual's place: the residual
      // becomes M - average at the end of round 1.
      for (int64_t i = 0; i < n * m; ++i) mat[i] += gradient[i];
      SeedZeroColumns(step, q);
      // P = M Q: rows of M against rows of Q, both contiguous; each sum in
      // the order of codes::PowerSgdP, which the GPU computes.
      std::vector<double> acc(r);
      for (int64_t i = 0; i < n; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float* row = &mat[i * m];
        for (int64_t k = 0; k < m; ++k) {
          const double v = row[k];
          const float* qk = &q[k * r];
          for (int64_t j = 0; j < r; ++j) acc[j] += v * qk[j];
        }
        for (int64_t j = 0; j < r; ++j) out[i * r + j] = static_cast<float>(acc[j]);
      }
      return;
    }
    // Q = M^T P with the averaged, orthonormal P of round 0, accumulated row
    // by row of M: each sum in the order of codes::PowerSgdQ.
    std::vector<double> qacc(m * r, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = &mat[i * m];
      const float* pi = &p_[i * r];
      for (int64_t k = 0; k < m; ++k) {
        const double v = row[k];
        double* o = &qacc[k * r];
        for (int64_t j = 0; j < r; ++j) o[j] += v * pi[j];
      }
    }
    for (int64_t i = 0; i < m * r; ++i) out[i] = static_cast<float>(qacc[i]);
  }

  void Absorb(const CodecStep&, int round, int world, absl::Span<const float>,
              const std::vector<absl::Span<float>>& state, absl::Span<const float> in,
              absl::Span<float> average) override {
    const int64_t n = rows_, m = cols_, r = rank_;
    const float inv_world = 1.0f / static_cast<float>(world);
    if (round == 0) {
      // P = the mean of the ranks' P, orthonormalised; kept for round 1.
      p_.assign(in.begin(), in.end());
      for (float& v : p_) v *= inv_world;
      Orthonormalise(absl::MakeSpan(p_), n, r);
      return;
    }
    // Q = the mean of the ranks' Q, written over the warm start.
    absl::Span<float> mat = state[0];
    absl::Span<float> q = state[1];
    for (int64_t i = 0; i < m * r; ++i) q[i] = in[i] * inv_world;

    // average = P Q^T; residual = M - average.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < m; ++k) {
        const float a = codes::PowerSgdApproximation(p_.data(), q.data(), r, i, k);
        average[i * m + k] = a;
        mat[i * m + k] -= a;
      }
    }
  }

 private:
  // Q starts as zeros (a fresh Parameter) and a column of it becomes zero when
  // M had no component along it; such columns get N(0, 1) values from a
  // generator seeded alike on every rank, so Q stays shared. A warm column
  // is kept.
  void SeedZeroColumns(const CodecStep& step, absl::Span<float> q) const {
    const int64_t m = cols_, r = rank_;
    std::vector<bool> zero(r, true);
    for (int64_t k = 0; k < m; ++k) {
      for (int64_t j = 0; j < r; ++j) {
        if (q[k * r + j] != 0.0f) zero[j] = false;
      }
    }
    bool any = false;
    for (bool z : zero) any = any || z;
    if (!any) return;
    const std::vector<float> draws = PowerSgdSeedDraws(step, m, r);
    for (int64_t k = 0; k < m; ++k) {
      for (int64_t j = 0; j < r; ++j) {
        if (zero[j]) q[k * r + j] = draws[k * r + j];
      }
    }
  }

  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t rank_ = 2;
  std::vector<float> p_;  // round 0's averaged, orthonormal P (n x r), read in round 1
};

NEREID_REGISTER_CODEC({"powersgd",
                       "PowerSGD: rank-r approximation P Q^T by one warm-started power iteration per step, with "
                       "error feedback; P and Q are allreduced, (rows + cols) * rank floats",
                       {{"rank",
                         "(2) rank of the approximation, 1..min(rows, cols); rows = dims[0], cols = the "
                         "product of the other dims"}},
                       [] { return std::make_unique<PowerSgdCodec>(); }});

}  // namespace

std::vector<float> PowerSgdSeedDraws(const CodecStep& step, int64_t m, int64_t r) {
  std::mt19937_64 random = step.Random(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> draws(m * r);
  for (float& v : draws) v = normal(random);  // every entry: a fixed sequence
  return draws;
}

}  // namespace nereid
