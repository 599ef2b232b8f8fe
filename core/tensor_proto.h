#ifndef NEREID_CORE_TENSOR_PROTO_H_
#define NEREID_CORE_TENSOR_PROTO_H_

// Checks that a TensorProto is self-consistent before anything is allocated
// for it: a known dtype, a valid shape, and either an initialiser spec or
// exactly as many values as the shape holds.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.pb.h"
#include "core/tensor_shape.h"

namespace nereid {

// The initialiser kinds InitializerSpec.kind accepts.
bool IsKnownInitializer(const std::string& kind);

// Validates `tensor` and returns its shape. When `expected` is given, the
// tensor's shape must be empty (taken from `expected`) or equal to it.
absl::StatusOr<TensorShape> ValidateTensorProto(const TensorProto& tensor,
                                                const TensorShape* expected = nullptr);

}  // namespace nereid

#endif  // NEREID_CORE_TENSOR_PROTO_H_
