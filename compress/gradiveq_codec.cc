// GradiVeQ (Yu, Li, Guo, Liu, Gupta, Aifer and Avestimehr, "GradiVeQ: Vector
// Quantization for Bandwidth-Efficient Gradient Aggregation in Distributed
// CNN Training", NeurIPS 2018): gradients are strongly linearly correlated,
// so PCA reduces their dimension.
//
// The gradient is cut into slices of `slice` values (the last one padded with
// zeros) and each slice x is sent as k = `coefficients` values c = U^T x,
// with U (slice x k, orthonormal columns) shared by every rank. The map is
// linear, so one allreduce sums the ranks' coefficients and every rank
// decodes average = U (sum c) / world: one rank sends ceil(n / slice) * k
// floats instead of n.
//
// U is learned, as in the paper, from uncompressed gradients: the top-k
// eigenvectors of the covariance, the sum of x x^T over slices of exact
// averaged gradients (at most 4096 slices a step, strided). The first
// `warmup` steps go uncompressed and give the first U; after that one step in
// every `refresh` goes uncompressed, the covariance's older samples are
// halved, its new ones added, and U recomputed. (Decoded averages would not
// do: they lie in U's span, so U could never learn a new direction.) The
// exact steps cost 1/refresh of the dense bytes on top. Error feedback keeps
// what U leaves out, x - U U^T x, for the next step.
//
// U and the covariance are computed from allreduced data only, the same
// bits on every rank, so they stay shared. A step is one round: its payload
// is the whole gradient on an exact step and the coefficients otherwise,
// decided from the step and the shared U alike on every rank.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compress/codec.h"

namespace nereid {
namespace {

bool AllZero(absl::Span<const float> values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; });
}

// The eigenvectors of the symmetric n x n `matrix` (row-major; its symmetric
// part is used) for its k largest eigenvalues, as the columns of the
// row-major n x k `out`, largest first. Cyclic Jacobi in double: a fixed
// rotation order, so the result is a deterministic function of the input.
// Each vector's largest-magnitude entry is made positive, fixing the sign.
void SymmetricTopEigenvectors(absl::Span<const float> matrix, int64_t n, int64_t k, absl::Span<float> out) {
  // `vt` holds the eigenvectors as rows, so a rotation updates two
  // contiguous rows of it and of `a` (whose columns are then mirrored).
  std::vector<double> a(n * n), vt(n * n, 0.0);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    vt[i * n + i] = 1.0;
    for (int64_t j = 0; j < n; ++j) {
      a[i * n + j] = 0.5 * (double(matrix[i * n + j]) + matrix[j * n + i]);
      total += a[i * n + j] * a[i * n + j];
    }
  }
  constexpr int kMaxSweeps = 60;  // Jacobi converges quadratically; ~10 sweeps in practice
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    double off = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    }
    if (off <= 1e-28 * total) break;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        double* ap = &a[p * n];
        double* aq = &a[q * n];
        const double apq = ap[q];
        if (apq == 0) continue;
        // The rotation J in the (p, q) plane that zeroes a[p][q]: A = J^T A J.
        const double app = ap[p], aqq = aq[q];
        const double theta = (aqq - app) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t r = 0; r < n; ++r) {
          const double x = ap[r], y = aq[r];
          ap[r] = c * x - s * y;
          aq[r] = s * x + c * y;
        }
        ap[p] = app - t * apq;
        aq[q] = aqq + t * apq;
        ap[q] = aq[p] = 0.0;
        for (int64_t r = 0; r < n; ++r) {
          a[r * n + p] = ap[r];
          a[r * n + q] = aq[r];
        }
        double* vp = &vt[p * n];
        double* vq = &vt[q * n];
        for (int64_t r = 0; r < n; ++r) {  // V = V J
          const double x = vp[r], y = vq[r];
          vp[r] = c * x - s * y;
          vq[r] = s * x + c * y;
        }
      }
    }
  }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return a[x * n + x] > a[y * n + y]; });
  for (int64_t j = 0; j < k; ++j) {
    const double* v = &vt[order[j] * n];
    int64_t big = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (std::fabs(v[i]) > std::fabs(v[big])) big = i;
    }
    const double sign = v[big] < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; ++i) out[i * k + j] = static_cast<float>(sign * v[i]);
  }
}

class GradiVeqCodec : public GradientCodec {
 public:
  // The method's premise is the linear correlation of convolution-filter
  // gradients; on fully connected layers it lost 4 points of accuracy on
  // lenet_fashion (bench/results/compression), so those stay dense.
  bool Suits(const std::vector<int64_t>& dims) const override { return dims.size() == 4; }

  absl::Status Init(const std::vector<int64_t>& dims, const CodecOptions& o) override {
    elements_ = ElementCount(dims);
    if (elements_ < 1) return absl::InvalidArgumentError("gradiveq: the gradient is empty");
    // At most 256: the Jacobi solver is cubic in the slice (a refresh at 256
    // takes about a second, at 64 a few milliseconds).
    absl::StatusOr<int64_t> slice = o.Integer("slice", 64, 1, 256);
    if (!slice.ok()) return slice.status();
    slice_ = *slice;
    absl::StatusOr<int64_t> k = o.Integer("coefficients", std::min<int64_t>(8, slice_), 1, slice_);
    if (!k.ok()) return k.status();
    k_ = *k;
    constexpr int64_t kMaxSteps = int64_t{1} << 40;
    absl::StatusOr<int64_t> refresh = o.Integer("refresh", 100, 1, kMaxSteps);
    if (!refresh.ok()) return refresh.status();
    refresh_ = *refresh;
    absl::StatusOr<int64_t> warmup = o.Integer("warmup", 20, 1, kMaxSteps);
    if (!warmup.ok()) return warmup.status();
    warmup_ = *warmup;
    absl::StatusOr<int64_t> feedback = o.Integer("error_feedback", 0, 0, 1);
    if (!feedback.ok()) return feedback.status();
    error_feedback_ = *feedback == 1;
    slices_ = (elements_ + slice_ - 1) / slice_;
    return absl::OkStatus();
  }

  CodecCollective collective() const override { return CodecCollective::kAllReduce; }

  std::vector<CodecStateSpec> State() const override {
    std::vector<CodecStateSpec> specs = {{"covariance", {slice_, slice_}, /*per_rank=*/false},
                                         {"basis", {slice_, k_}, /*per_rank=*/false}};
    if (error_feedback_) specs.push_back({"residual", {elements_}, /*per_rank=*/true});
    return specs;
  }

  // The compressed payload. The warm-up steps and one step per refresh
  // period send the whole gradient; the plan accounts for the others.
  int64_t PayloadFloats() const override { return slices_ * k_; }

  // One round: the whole x on an exact step, the coefficients otherwise.
  int64_t RoundFloats(const CodecStep& step, int, const std::vector<absl::Span<float>>& state) const override {
    return StepKind(step, state[kBasis]) == Kind::kCompressed ? slices_ * k_ : elements_;
  }

  // Writes x = gradient + residual (exact) or c = U^T x per slice
  // (compressed); the residual becomes 0 (exact) or x - U c with this rank's
  // own c (compressed).
  void Contribute(const CodecStep& step, int, int, absl::Span<const float> gradient,
                  const std::vector<absl::Span<float>>& state, absl::Span<float> out) override {
    absl::Span<float> basis = state[kBasis];
    // x = gradient + residual, built in the residual's place.
    absl::Span<const float> x = gradient;
    if (error_feedback_) {
      absl::Span<float> residual = state[kResidual];
      for (int64_t i = 0; i < elements_; ++i) residual[i] += gradient[i];
      x = residual;
    }
    if (StepKind(step, basis) != Kind::kCompressed) {
      std::copy(x.begin(), x.end(), out.begin());
      if (error_feedback_) std::fill(state[kResidual].begin(), state[kResidual].end(), 0.0f);
      return;
    }
    // c = U^T x per slice; U's rows are contiguous, so walk the slice.
    std::vector<double> acc(k_);
    for (int64_t s = 0; s < slices_; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const int64_t begin = s * slice_, len = std::min(slice_, elements_ - begin);
      for (int64_t i = 0; i < len; ++i) {
        const double xi = x[begin + i];
        const float* u = &basis[i * k_];
        for (int64_t j = 0; j < k_; ++j) acc[j] += xi * u[j];
      }
      for (int64_t j = 0; j < k_; ++j) out[s * k_ + j] = static_cast<float>(acc[j]);
    }
    if (error_feedback_) {  // residual = x - U c, with this rank's own c
      Decode(basis, out, state[kResidual], /*subtract=*/true);
    }
  }

  // Exact: average = sum / world, which also feeds the covariance and, at
  // the end of the warm-up or on a refresh, a new basis. Compressed:
  // average = U (sum c) / world.
  void Absorb(const CodecStep& step, int, int world, absl::Span<const float>,
              const std::vector<absl::Span<float>>& state, absl::Span<const float> in,
              absl::Span<float> average) override {
    absl::Span<float> covariance = state[kCovariance], basis = state[kBasis];
    const Kind kind = StepKind(step, basis);  // before the basis is recomputed below
    const float inv_world = 1.0f / static_cast<float>(world);
    if (kind != Kind::kCompressed) {
      for (int64_t i = 0; i < elements_; ++i) average[i] = in[i] * inv_world;
      const bool refreshing = kind == Kind::kRefreshing;
      // Older samples count half at each refresh: the basis follows the
      // gradients as training moves on.
      if (refreshing) {
        for (float& v : covariance) v *= 0.5f;
      }
      // A strided sample of the slices, its phase moving with the step: enough
      // for a slice x slice covariance, at a bounded cost per step.
      const int64_t stride = (slices_ + kCovarianceSlices - 1) / kCovarianceSlices;
      AddSliceCovariance(average, step.step % stride, stride, covariance);
      if ((refreshing || step.step + 1 >= warmup_) && !AllZero(covariance)) {
        SymmetricTopEigenvectors(covariance, slice_, k_, basis);
      }
      return;
    }
    code_.resize(slices_ * k_);
    for (int64_t i = 0; i < slices_ * k_; ++i) code_[i] = in[i] * inv_world;
    std::fill(average.begin(), average.end(), 0.0f);
    Decode(basis, code_, average, /*subtract=*/false);
  }

 private:
  static constexpr int kCovariance = 0, kBasis = 1, kResidual = 2;  // State()'s order
  static constexpr int64_t kCovarianceSlices = 4096;                // the most slices a warm-up step adds

  enum class Kind { kWarmingUp, kRefreshing, kCompressed };

  // Exact steps: the warm-up, and one step every `refresh` steps after it,
  // whose exact averages keep the basis following the gradients (the
  // decoded averages lie in U's span and could only rotate U within it).
  // The basis is shared, so every rank decides alike; RoundFloats, Contribute
  // and Absorb all see the basis as it was at the start of the step.
  Kind StepKind(const CodecStep& step, absl::Span<const float> basis) const {
    if (step.step < warmup_ || AllZero(basis)) return Kind::kWarmingUp;
    return step.step % refresh_ == 0 ? Kind::kRefreshing : Kind::kCompressed;
  }

  // out -= U c (subtract) or out += U c, slice by slice; the padding of the
  // last slice is dropped.
  void Decode(absl::Span<const float> basis, absl::Span<const float> code, absl::Span<float> out, bool subtract) const {
    for (int64_t s = 0; s < slices_; ++s) {
      const int64_t begin = s * slice_, len = std::min(slice_, elements_ - begin);
      const float* c = &code[s * k_];
      for (int64_t i = 0; i < len; ++i) {
        const float* u = &basis[i * k_];
        double v = 0;
        for (int64_t j = 0; j < k_; ++j) v += double(u[j]) * c[j];
        out[begin + i] = subtract ? out[begin + i] - static_cast<float>(v) : out[begin + i] + static_cast<float>(v);
      }
    }
  }

  // covariance += sum of x x^T over slices first, first + stride, ... of
  // `values`, the last one zero-padded. Upper triangle in double, then
  // mirrored.
  void AddSliceCovariance(absl::Span<const float> values, int64_t first, int64_t stride,
                          absl::Span<float> covariance) const {
    const int64_t n = slice_;
    std::vector<double> sum(n * n, 0.0);
    for (int64_t s = first; s < slices_; s += stride) {
      const int64_t begin = s * n, len = std::min(n, elements_ - begin);
      const float* x = &values[begin];
      for (int64_t i = 0; i < len; ++i) {
        const double xi = x[i];
        if (xi == 0) continue;
        double* row = &sum[i * n];
        for (int64_t j = i; j < len; ++j) row[j] += xi * x[j];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i; j < n; ++j) {
        covariance[i * n + j] += static_cast<float>(sum[i * n + j]);
        if (j != i) covariance[j * n + i] += static_cast<float>(sum[i * n + j]);
      }
    }
  }

  int64_t elements_ = 0;
  int64_t slice_ = 64;
  int64_t k_ = 8;
  int64_t refresh_ = 100;
  int64_t warmup_ = 100;
  bool error_feedback_ = true;
  int64_t slices_ = 0;
  std::vector<float> code_;  // Absorb's averaged coefficients
};

NEREID_REGISTER_CODEC({"gradiveq",
                       "GradiVeQ: each slice of the gradient sent as its coefficients on a PCA basis learned from "
                       "averaged gradients, with error feedback; coefficients are allreduced, "
                       "ceil(n / slice) * coefficients floats",
                       {{"slice", "(64) values per slice, 1..256"},
                        {"coefficients", "(8) coefficients per slice (the basis size), 1..slice"},
                        {"refresh", "(100) one uncompressed step in every refresh steps updates the basis"},
                        {"warmup", "(20) uncompressed steps whose averages give the first basis"},
                        {"error_feedback", "(0) 1 keeps what the basis leaves out for the next step (it piles up outside "
                                           "the basis until an exact step); 0 drops it, as the paper does"}},
                       [] { return std::make_unique<GradiVeqCodec>(); }});

}  // namespace
}  // namespace nereid
