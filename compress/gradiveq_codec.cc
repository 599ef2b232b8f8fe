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
#include <vector>

#include "absl/strings/str_cat.h"
#include "compress/codec.h"
#include "compress/gradiveq_steps.h"

namespace nereid {
namespace {

bool AllZero(absl::Span<const float> values) { return codes::AllZeroValues(values.data(), values.size()); }

// The top k eigenvectors of `matrix` (compress/gradiveq_steps.h) into `out`.
void SymmetricTopEigenvectors(absl::Span<const float> matrix, int64_t n, int64_t k, absl::Span<float> out) {
  std::vector<double> a(n * n), vt(n * n);
  std::vector<int64_t> order(n);
  codes::SymmetricTopEigenvectors(matrix.data(), n, k, out.data(), a.data(), vt.data(), order.data());
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
    layout_.refresh = *refresh;
    absl::StatusOr<int64_t> warmup = o.Integer("warmup", 20, 1, kMaxSteps);
    if (!warmup.ok()) return warmup.status();
    layout_.warmup = *warmup;
    absl::StatusOr<int64_t> feedback = o.Integer("error_feedback", 0, 0, 1);
    if (!feedback.ok()) return feedback.status();
    layout_.error_feedback = error_feedback_ = *feedback == 1;
    layout_.slices = {elements_, slice_, k_};
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

  std::optional<codes::GradiveqCode> gradiveq_code() const override { return layout_; }

  // The compressed payload. The warm-up steps and one step per refresh
  // period send the whole gradient; the plan accounts for the others.
  int64_t PayloadFloats() const override { return slices_ * k_; }

  // One round: the whole x on an exact step, the coefficients otherwise.
  int64_t RoundFloats(const CodecStep& step, int, const std::vector<absl::Span<float>>& state) const override {
    return layout_.Floats(StepKind(step, state[kBasis]));
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
    if (StepKind(step, basis) != codes::GradiveqStep::kCompressed) {
      std::copy(x.begin(), x.end(), out.begin());
      if (error_feedback_) std::fill(state[kResidual].begin(), state[kResidual].end(), 0.0f);
      return;
    }
    // c = U^T x per slice.
    layout_.slices.Coefficients(x.data(), basis.data(), out.data());
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
    const codes::GradiveqStep kind = StepKind(step, basis);  // before the basis is recomputed below
    const float inv_world = 1.0f / static_cast<float>(world);
    if (kind != codes::GradiveqStep::kCompressed) {
      for (int64_t i = 0; i < elements_; ++i) average[i] = in[i] * inv_world;
      const bool refreshing = kind == codes::GradiveqStep::kRefreshing;
      // Older samples count half at each refresh: the basis follows the
      // gradients as training moves on.
      if (refreshing) {
        for (float& v : covariance) v *= 0.5f;
      }
      // A strided sample of the slices, its phase moving with the step: enough
      // for a slice x slice covariance, at a bounded cost per step.
      const int64_t stride = layout_.CovarianceStride();
      AddSliceCovariance(average, step.step % stride, stride, covariance);
      if (layout_.Recomputes(kind, step.step) && !AllZero(covariance)) {
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
  // The step's kind (gradiveq_steps.h), seen by RoundFloats, Contribute and
  // Absorb alike: the basis as it was at the start of the step.
  codes::GradiveqStep StepKind(const CodecStep& step, absl::Span<const float> basis) const {
    return layout_.StepAt(step.step, AllZero(basis));
  }

  // out -= U c (subtract) or out += U c, slice by slice; the padding of the
  // last slice is dropped.
  void Decode(absl::Span<const float> basis, absl::Span<const float> code, absl::Span<float> out, bool subtract) const {
    layout_.slices.AddDecoded(basis.data(), code.data(), subtract, out.data());
  }

  // covariance += sum of x x^T over slices first, first + stride, ... of
  // `values`, the last one zero-padded: the upper triangle in double,
  // mirrored.
  void AddSliceCovariance(absl::Span<const float> values, int64_t first, int64_t stride,
                          absl::Span<float> covariance) const {
    std::vector<double> sums(slice_ * slice_, 0.0);
    layout_.slices.CovarianceSums(values.data(), first, stride, sums.data());
    for (int64_t i = 0; i < slice_; ++i) {
      for (int64_t j = i; j < slice_; ++j) {
        const float sum = static_cast<float>(sums[i * slice_ + j]);
        covariance[i * slice_ + j] += sum;
        if (j != i) covariance[j * slice_ + i] += sum;
      }
    }
  }

  int64_t elements_ = 0;
  int64_t slice_ = 64;
  int64_t k_ = 8;
  codes::GradiveqCode layout_;  // the slices and the schedule
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
