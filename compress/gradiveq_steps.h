#ifndef NEREID_COMPRESS_GRADIVEQ_STEPS_H_
#define NEREID_COMPRESS_GRADIVEQ_STEPS_H_

// GradiVeQ's arithmetic one output at a time, for the host codec
// (gradiveq_codec.cc) and its GPU kernels (ops/cuda/codec_gpu.cu): each
// output's sum runs in double, in the same order on both, so the GPU's
// coefficients, decodes, covariance and basis are the host's bits
// (bucket_codes.h says why no fused multiply-adds). The gradient is cut
// into slices of `slice` values, the last one short (its padding is zeros);
// U (slice x k, row-major) is the shared basis.

#include <cmath>
#include <cstdint>
#include <vector>

#include "compress/bucket_codes.h"
#include "compress/sticky_word.h"

namespace nereid::codes {

struct GradiveqSlices {
  int64_t elements = 0;
  int64_t slice = 64;
  int64_t k = 8;

  NEREID_HD int64_t Slices() const { return (elements + slice - 1) / slice; }
  // The values slice s holds (the last may be short).
  NEREID_HD int64_t Length(int64_t s) const {
    const int64_t rest = elements - s * slice;
    return rest < slice ? rest : slice;
  }

  // Coefficient j of slice s: the sum over i in order of x[i] U[i][j].
  NEREID_HD float Coefficient(const float* x, const float* basis, int64_t s, int64_t j) const {
    const float* xs = x + s * slice;
    double acc = 0.0;
    for (int64_t i = 0; i < Length(s); ++i) acc += static_cast<double>(xs[i]) * static_cast<double>(basis[i * k + j]);
    return static_cast<float>(acc);
  }

  // Value i of slice s decoded from its coefficients: the sum over j in
  // order of U[i][j] c[s][j].
  NEREID_HD float Decoded(const float* basis, const float* code, int64_t s, int64_t i) const {
    const float* c = code + s * k;
    double v = 0.0;
    for (int64_t j = 0; j < k; ++j) v += static_cast<double>(basis[i * k + j]) * static_cast<double>(c[j]);
    return static_cast<float>(v);
  }

  // Entry (i, j), i <= j, of the sum of x x^T over slices first, first +
  // stride, ... of `values`, each zero-padded: a slice's zero x_i adds
  // nothing (not even 0 * inf).
  NEREID_HD double CovarianceSum(const float* values, int64_t first, int64_t stride, int64_t i, int64_t j) const {
    double sum = 0.0;
    for (int64_t s = first; s < Slices(); s += stride) {
      if (j >= Length(s)) continue;
      const double xi = values[s * slice + i];
      if (xi == 0) continue;
      sum += xi * static_cast<double>(values[s * slice + j]);
    }
    return sum;
  }

  // The host codec's loops (gradiveq_codec.cc): every output's sum as the
  // one-output functions above make it, same terms in the same order, but
  // walked slice by slice so each value is read once, from the cache
  // (gradiveq_steps_test checks the bits). The GPU runs the ones above, an
  // output per thread.

  // out[s k + j] = Coefficient(x, basis, s, j) for every slice.
  void Coefficients(const float* x, const float* basis, float* out) const {
    const int64_t count = Slices(), kk = k;
    std::vector<double> acc(kk);
    for (int64_t s = 0; s < count; ++s) {
      for (int64_t j = 0; j < kk; ++j) acc[j] = 0.0;
      const float* xs = x + s * slice;
      const int64_t len = Length(s);
      for (int64_t i = 0; i < len; ++i) {
        const double xi = xs[i];
        const float* u = basis + i * kk;
        for (int64_t j = 0; j < kk; ++j) acc[j] += xi * static_cast<double>(u[j]);
      }
      for (int64_t j = 0; j < kk; ++j) out[s * kk + j] = static_cast<float>(acc[j]);
    }
  }

  // out[e] -= Decoded (subtract) or out[e] += Decoded, for every value e.
  void AddDecoded(const float* basis, const float* code, bool subtract, float* out) const {
    const int64_t count = Slices();
    for (int64_t s = 0; s < count; ++s) {
      float* os = out + s * slice;
      const float* c = code + s * k;
      const int64_t len = Length(s);
      for (int64_t i = 0; i < len; ++i) {
        const float* u = basis + i * k;
        double v = 0.0;
        for (int64_t j = 0; j < k; ++j) v += static_cast<double>(u[j]) * static_cast<double>(c[j]);
        os[i] = subtract ? os[i] - static_cast<float>(v) : os[i] + static_cast<float>(v);
      }
    }
  }

  // sum[i slice + j] += the terms of CovarianceSum(values, first, stride, i,
  // j) for every i <= j (the upper triangle; `sum` starts at zero).
  void CovarianceSums(const float* values, int64_t first, int64_t stride, double* sum) const {
    const int64_t n = slice, count = Slices();
    for (int64_t s = first; s < count; s += stride) {
      const float* x = values + s * n;
      const int64_t len = Length(s);
      for (int64_t i = 0; i < len; ++i) {
        const double xi = x[i];
        if (xi == 0) continue;
        double* row = sum + i * n;
        for (int64_t j = i; j < len; ++j) row[j] += xi * static_cast<double>(x[j]);
      }
    }
  }
};

// Which steps go exact: the warm-up (and any step while the basis is all
// zero), whose averages give the first basis, and one step every `refresh`
// after it, whose exact averages keep the basis following the gradients (the
// decoded averages lie in U's span and could only rotate U within it). The
// basis is shared, so every rank decides alike.
enum class GradiveqStep { kWarmingUp, kRefreshing, kCompressed };

struct GradiveqCode {
  GradiveqSlices slices;
  int64_t warmup = 20;
  int64_t refresh = 100;
  bool error_feedback = false;
  // The most slices an exact step adds to the covariance.
  static constexpr int64_t kCovarianceSlices = 4096;

  NEREID_HD GradiveqStep StepAt(int64_t step, bool basis_all_zero) const {
    if (step < warmup || basis_all_zero) return GradiveqStep::kWarmingUp;
    return step % refresh == 0 ? GradiveqStep::kRefreshing : GradiveqStep::kCompressed;
  }
  // A step's payload: the whole gradient on an exact step, the coefficients
  // otherwise.
  NEREID_HD int64_t Floats(GradiveqStep kind) const {
    return kind == GradiveqStep::kCompressed ? slices.Slices() * slices.k : slices.elements;
  }
  // Exact steps sample the slices with this stride, its phase moving with
  // the step: enough for a slice x slice covariance, at a bounded cost.
  NEREID_HD int64_t CovarianceStride() const { return (slices.Slices() + kCovarianceSlices - 1) / kCovarianceSlices; }
  // Whether step `step`'s kind needs the basis's word (non-zero or not)
  // read again, given the last read. Not in the warm-up, exact whatever the
  // basis; after it, as a StickyWord: no step makes a non-zero basis zero
  // again (it changes only by a recompute from a covariance not all zero,
  // which gives unit vectors).
  bool NeedsBasisWord(int64_t step, const StickyWord& last) const { return step >= warmup && last.NeedsRead(step); }
  // Whether an exact step's absorb recomputes the basis (given a covariance
  // not all zero).
  NEREID_HD bool Recomputes(GradiveqStep kind, int64_t step) const {
    return kind == GradiveqStep::kRefreshing || step + 1 >= warmup;
  }
};

NEREID_HD inline bool AllZeroValues(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] != 0.0f) return false;
  }
  return true;
}

// The eigenvectors of the symmetric n x n `matrix` (row-major; its symmetric
// part is used) for its k largest eigenvalues, as the columns of the
// row-major n x k `out`, largest first. Cyclic Jacobi in double: a fixed
// rotation order, so the result is a deterministic function of the input.
// Each vector's largest-magnitude entry is made positive, fixing the sign.
// Scratch: `a` and `vt` (n * n doubles each), `order` (n).
NEREID_HD inline void SymmetricTopEigenvectors(const float* matrix, int64_t n, int64_t k, float* out, double* a,
                                               double* vt, int64_t* order) {
  // `vt` holds the eigenvectors as rows, so a rotation updates two
  // contiguous rows of it and of `a` (whose columns are then mirrored).
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      vt[i * n + j] = i == j ? 1.0 : 0.0;
      a[i * n + j] = 0.5 * (static_cast<double>(matrix[i * n + j]) + static_cast<double>(matrix[j * n + i]));
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
        const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
        const double c = 1 / sqrt(t * t + 1), s = t * c;
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
  // The eigenvalues largest first, ties in index order (a stable insertion
  // sort).
  for (int64_t i = 0; i < n; ++i) {
    int64_t p = i;
    while (p > 0 && a[order[p - 1] * n + order[p - 1]] < a[i * n + i]) {
      order[p] = order[p - 1];
      --p;
    }
    order[p] = i;
  }
  for (int64_t j = 0; j < k; ++j) {
    const double* v = &vt[order[j] * n];
    int64_t big = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (fabs(v[i]) > fabs(v[big])) big = i;
    }
    const double sign = v[big] < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; ++i) out[i * k + j] = static_cast<float>(sign * v[i]);
  }
}

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_GRADIVEQ_STEPS_H_
