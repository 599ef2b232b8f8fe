// Orthonormalisation of a small dense matrix's columns (PowerSGD's P, the
// low-rank pushes' P).

#include "compress/orthonormalise.h"

#include <cmath>
#include <vector>

namespace nereid {

// Modified Gram-Schmidt on the columns of the row-major rows x cols matrix
// `a`, in double, projecting twice ("twice is enough") so that columns
// stay orthogonal when one nearly depends on the earlier ones. A column left
// with under kDependent of its length is dependent: it becomes zero, not
// normalised rounding noise.
void Orthonormalise(absl::Span<float> a, int64_t rows, int64_t cols) {
  constexpr double kDependent = 1e-5;
  std::vector<double> col(rows), basis(rows * cols, 0.0);  // basis: column-major, contiguous columns
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
    const double scale = zero ? 0.0 : 1.0 / std::sqrt(after);
    double* u = &basis[j * rows];
    for (int64_t i = 0; i < rows; ++i) u[i] = col[i] * scale;
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) a[i * cols + j] = static_cast<float>(basis[j * rows + i]);
  }
}

}  // namespace nereid
