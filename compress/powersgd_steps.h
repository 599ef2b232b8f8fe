#ifndef NEREID_COMPRESS_POWERSGD_STEPS_H_
#define NEREID_COMPRESS_POWERSGD_STEPS_H_

// PowerSGD's arithmetic one output at a time, for the host codec
// (powersgd_codec.cc), the orthonormalisation (orthonormalise.cc) and the
// GPU kernels (ops/cuda/codec_gpu.cu): each output's sums run in double, in
// the same order on both, so the GPU's P, Q, average and residual are the
// host's bits (bucket_codes.h says why no fused multiply-adds).

#include <cmath>
#include <cstdint>

#include "compress/bucket_codes.h"

namespace nereid::codes {

// Element (i, j) of P = M Q (M: n x m, Q: m x r, row-major): the sum over
// k in order of M[i][k] * Q[k][j].
NEREID_HD inline float PowerSgdP(const float* mat, const float* q, int64_t m, int64_t r, int64_t i, int64_t j) {
  double acc = 0.0;
  const float* row = mat + i * m;
  for (int64_t k = 0; k < m; ++k) acc += static_cast<double>(row[k]) * static_cast<double>(q[k * r + j]);
  return static_cast<float>(acc);
}

// Element (k, j) of Q = M^T P (P: n x r): the sum over i in order of
// M[i][k] * P[i][j].
NEREID_HD inline float PowerSgdQ(const float* mat, const float* p, int64_t n, int64_t m, int64_t r, int64_t k,
                                 int64_t j) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(mat[i * m + k]) * static_cast<double>(p[i * r + j]);
  return static_cast<float>(acc);
}

// Element (i, k) of the approximation P Q^T: the sum over j in order.
NEREID_HD inline float PowerSgdApproximation(const float* p, const float* q, int64_t r, int64_t i, int64_t k) {
  double v = 0.0;
  for (int64_t j = 0; j < r; ++j) v += static_cast<double>(p[i * r + j]) * static_cast<double>(q[k * r + j]);
  return static_cast<float>(v);
}

// Modified Gram-Schmidt on the columns of the row-major rows x cols matrix
// `a`, in double, projecting twice ("twice is enough") so that columns stay
// orthogonal when one nearly depends on the earlier ones. A column left with
// under 1e-5 of its length is dependent: it becomes zero, not normalised
// rounding noise. Scratch: `col` (rows) and `basis` (rows * cols doubles).
NEREID_HD inline void OrthonormaliseColumns(float* a, int64_t rows, int64_t cols, double* col, double* basis) {
  constexpr double kDependent = 1e-5;
  for (int64_t j = 0; j < cols; ++j) {
    double before = 0;
    for (int64_t i = 0; i < rows; ++i) {
      col[i] = a[i * cols + j];
      before += col[i] * col[i];
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t l = 0; l < j; ++l) {
        const double* u = &basis[l * rows];
        double dot = 0;
        for (int64_t i = 0; i < rows; ++i) dot += u[i] * col[i];
        for (int64_t i = 0; i < rows; ++i) col[i] -= dot * u[i];
      }
    }
    double after = 0;
    for (int64_t i = 0; i < rows; ++i) after += col[i] * col[i];
    const bool zero = before == 0 || after <= kDependent * kDependent * before;
    const double scale = zero ? 0.0 : 1.0 / sqrt(after);
    double* u = &basis[j * rows];
    for (int64_t i = 0; i < rows; ++i) u[i] = col[i] * scale;
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) a[i * cols + j] = static_cast<float>(basis[j * rows + i]);
  }
}

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_POWERSGD_STEPS_H_
