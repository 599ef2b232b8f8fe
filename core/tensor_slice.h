#ifndef NEREID_CORE_TENSOR_SLICE_H_
#define NEREID_CORE_TENSOR_SLICE_H_

// Block `index` of `count` equal blocks of a tensor along one axis: how a
// sharded parameter takes its part of the full tensor the unsharded model
// would have (so a sharded run starts from the same weights).

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace nereid {

// A new tensor holding block `index` of `full` cut into `count` equal blocks
// along `axis`. InvalidArgument if the axis is out of range, `count` does not
// divide that dimension, or `index` is outside [0, count).
absl::StatusOr<Tensor> SliceAlongAxis(const Tensor& full, int axis, int64_t index, int64_t count);

}  // namespace nereid

#endif  // NEREID_CORE_TENSOR_SLICE_H_
