#ifndef NEREID_CORE_INITIALIZERS_H_
#define NEREID_CORE_INITIALIZERS_H_

// Turns a TensorProto (values or an initialiser spec) into a Tensor. Random
// initialisers are deterministic functions of their seed: the generator is
// mt19937_64 and the normal and uniform draws are computed here (not by
// <random>'s distributions, whose algorithms differ between standard
// libraries), so a model starts from the same values everywhere.
//
// Fans: a [in, out] matrix has fan_in = in, fan_out = out; an OIHW filter has
// fan_in = I*H*W and fan_out = O*H*W; a vector has both equal to its length.
// The spec's fan_in/fan_out override these.

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "core/tensor.pb.h"
#include "core/tensor_shape.h"

namespace nereid {

// `shape` must be fully defined; the proto's own shape (if any) must match.
absl::StatusOr<Tensor> MaterializeTensor(const TensorProto& proto, const TensorShape& shape);

}  // namespace nereid

#endif  // NEREID_CORE_INITIALIZERS_H_
