#ifndef NEREID_CORE_NPY_FORMAT_H_
#define NEREID_CORE_NPY_FORMAT_H_

// NumPy's .npy format (version 1.0): a magic string, a Python-dict header
// naming the dtype, the order and the shape, then the raw C-order data.
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace nereid {

// The .npy bytes of `tensor` (little-endian, C order).
absl::StatusOr<std::string> EncodeNpy(const Tensor& tensor);

// A tensor from .npy bytes: float32/float64/int32/int64/uint8/bool, little
// endian, C order. Anything else is an error naming what was found.
absl::StatusOr<Tensor> DecodeNpy(absl::string_view bytes);

}  // namespace nereid

#endif  // NEREID_CORE_NPY_FORMAT_H_
