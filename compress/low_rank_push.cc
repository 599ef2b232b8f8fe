#include "compress/low_rank_push.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compress/orthonormalise.h"

namespace nereid {
namespace {

// reference += P Q^T (P: rows x rank, Q: cols x rank, row-major). Both ends of
// an edge call this one function on the same numbers, so their references
// stay equal bit for bit; noinline keeps the two call sites from being
// compiled into differently contracted arithmetic.
__attribute__((noinline)) void AddProduct(const float* p, const float* q, int64_t rows, int64_t cols, int64_t rank,
                                          float* reference) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* pi = p + i * rank;
    float* out = reference + i * cols;
    for (int64_t k = 0; k < cols; ++k) {
      const float* qk = q + k * rank;
      double v = 0;
      for (int64_t j = 0; j < rank; ++j) v += static_cast<double>(pi[j]) * qk[j];
      out[k] += static_cast<float>(v);
    }
  }
}

// Columns of the warm start Q that are all zeros (a fresh edge, or one whose
// difference had nothing along them) get N(0, 1) values.
void SeedZeroColumns(uint64_t seed, int64_t cols, int64_t rank, float* q) {
  std::vector<bool> zero(rank, true);
  for (int64_t k = 0; k < cols * rank; ++k) {
    if (q[k] != 0.0f) zero[k % rank] = false;
  }
  if (std::none_of(zero.begin(), zero.end(), [](bool z) { return z; })) return;
  const std::vector<float> normals = LowRankPush::SeedDraws(seed, cols, rank);
  for (int64_t k = 0; k < cols * rank; ++k) {
    if (zero[k % rank]) q[k] = normals[k];
  }
}

}  // namespace

void LowRankPush::Mix(absl::Span<const float> x, absl::Span<const float> received, absl::Span<const float> sent,
                      float consensus, absl::Span<float> y) {
  for (size_t i = 0; i < y.size(); ++i) y[i] = x[i] + consensus * (received[i] - sent[i]);
}

std::vector<float> LowRankPush::SeedDraws(uint64_t seed, int64_t cols, int64_t rank) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> normals(cols * rank);
  for (float& v : normals) v = normal(random);  // drawn for every entry: a fixed sequence
  return normals;
}

absl::StatusOr<LowRankPush> LowRankPush::Create(std::vector<PushSegment> segments) {
  if (segments.empty()) return absl::InvalidArgumentError("a low-rank push needs at least one segment");
  for (size_t s = 0; s < segments.size(); ++s) {
    const PushSegment& g = segments[s];
    if (g.rows < 1 || g.cols < 1 || g.rank < 0 || (g.rank > 0 && g.rank >= std::min(g.rows, g.cols))) {
      return absl::InvalidArgumentError(absl::StrCat("low-rank push segment ", s, ": ", g.rows, " x ", g.cols,
                                                     " at rank ", g.rank,
                                                     " (rows and cols >= 1, 0 <= rank < min(rows, cols))"));
    }
  }
  return LowRankPush(std::move(segments));
}

LowRankPush::LowRankPush(std::vector<PushSegment> segments) : segments_(std::move(segments)) {
  for (const PushSegment& g : segments_) {
    elements_ += g.rows * g.cols;
    basis_floats_ += g.cols * g.rank;
  }
}

int64_t LowRankPush::MessageFloats(bool started) const {
  if (!started) return elements_;
  int64_t floats = 0;
  for (const PushSegment& g : segments_) floats += g.rank == 0 ? g.rows * g.cols : (g.rows + g.cols) * g.rank;
  return floats;
}

void LowRankPush::Encode(absl::Span<const float> x, bool started, uint64_t seed, absl::Span<float> reference,
                         absl::Span<float> basis, absl::Span<float> message) const {
  if (!started) {
    std::memcpy(message.data(), x.data(), elements_ * sizeof(float));
    std::memcpy(reference.data(), x.data(), elements_ * sizeof(float));
    return;
  }
  int64_t at = 0, sent = 0, warm = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const auto [n, m, r] = segments_[s];
    const float* xs = x.data() + at;
    float* ref = reference.data() + at;
    float* out = message.data() + sent;
    if (r == 0) {
      std::memcpy(out, xs, n * m * sizeof(float));
      std::memcpy(ref, xs, n * m * sizeof(float));
      at += n * m;
      sent += n * m;
      continue;
    }
    std::vector<float> d(n * m);
    for (int64_t i = 0; i < n * m; ++i) d[i] = xs[i] - ref[i];
    float* q = basis.data() + warm;
    SeedZeroColumns(seed + s, m, r, q);
    // P = D Q, orthonormalised; then Q = D^T P: the rank-r approximation P Q^T.
    float* p = out;
    std::vector<double> acc(r);
    for (int64_t i = 0; i < n; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < m; ++k) {
        const double v = d[i * m + k];
        for (int64_t j = 0; j < r; ++j) acc[j] += v * q[k * r + j];
      }
      for (int64_t j = 0; j < r; ++j) p[i * r + j] = static_cast<float>(acc[j]);
    }
    Orthonormalise(absl::MakeSpan(p, n * r), n, r);
    std::vector<double> qacc(m * r, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < m; ++k) {
        const double v = d[i * m + k];
        for (int64_t j = 0; j < r; ++j) qacc[k * r + j] += v * p[i * r + j];
      }
    }
    float* q_sent = out + n * r;
    for (int64_t i = 0; i < m * r; ++i) q[i] = q_sent[i] = static_cast<float>(qacc[i]);
    AddProduct(p, q_sent, n, m, r, ref);
    at += n * m;
    sent += (n + m) * r;
    warm += m * r;
  }
}

void LowRankPush::Decode(absl::Span<const float> message, bool started, absl::Span<float> reference) const {
  if (!started) {
    std::memcpy(reference.data(), message.data(), elements_ * sizeof(float));
    return;
  }
  int64_t at = 0, sent = 0;
  for (const auto& [n, m, r] : segments_) {
    if (r == 0) {
      std::memcpy(reference.data() + at, message.data() + sent, n * m * sizeof(float));
      sent += n * m;
    } else {
      AddProduct(message.data() + sent, message.data() + sent + n * r, n, m, r, reference.data() + at);
      sent += (n + m) * r;
    }
    at += n * m;
  }
}

}  // namespace nereid
