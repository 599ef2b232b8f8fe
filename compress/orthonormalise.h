#ifndef NEREID_COMPRESS_ORTHONORMALISE_H_
#define NEREID_COMPRESS_ORTHONORMALISE_H_

#include <cstdint>

#include "absl/types/span.h"

namespace nereid {

// Makes the columns of the row-major rows x cols matrix `a` orthonormal
// (modified Gram-Schmidt in double, projecting twice); a column that depends
// on the earlier ones becomes zero. The same input gives the same output on
// every rank.
void Orthonormalise(absl::Span<float> a, int64_t rows, int64_t cols);

}  // namespace nereid

#endif  // NEREID_COMPRESS_ORTHONORMALISE_H_
