// Orthonormalisation of a small dense matrix's columns (PowerSGD's P, the
// low-rank pushes' P): compress/powersgd_steps.h's, which the GPU shares.

#include "compress/orthonormalise.h"

#include <vector>

#include "compress/powersgd_steps.h"

namespace nereid {

void Orthonormalise(absl::Span<float> a, int64_t rows, int64_t cols) {
  std::vector<double> col(rows), basis(rows * cols, 0.0);  // basis: column-major, contiguous columns
  codes::OrthonormaliseColumns(a.data(), rows, cols, col.data(), basis.data());
}

}  // namespace nereid
