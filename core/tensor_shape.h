#ifndef NEREID_CORE_TENSOR_SHAPE_H_
#define NEREID_CORE_TENSOR_SHAPE_H_

// Shapes and dtypes as the IR and the shape functions see them. A dimension of
// kUnknownDim (-1) is not known until run time (an Input's batch dimension);
// every other dimension is >= 0. Element counts are computed with overflow
// checks and capped at kMaxTensorElements, so an absurd shape is refused
// before anything is allocated.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.pb.h"

namespace nereid {

inline constexpr int64_t kUnknownDim = -1;
inline constexpr int kMaxRank = 8;
// 2^32 elements: 16 GiB of float32, more than one worker of this project holds.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 32;

class TensorShape {
 public:
  TensorShape() = default;  // a scalar
  explicit TensorShape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  // Checks rank, that every dim is >= 0 or kUnknownDim, and that the known
  // dims multiply to at most kMaxTensorElements.
  static absl::StatusOr<TensorShape> FromProto(const TensorShapeProto& proto);
  TensorShapeProto ToProto() const;

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool IsFullyDefined() const;
  bool HasUnknownDim() const { return !IsFullyDefined(); }

  // The product of the known dims (unknown dims count as 1): the element count
  // per sample when the unknown dim is the batch. Always <= kMaxTensorElements
  // for shapes built by FromProto or checked with Validate().
  int64_t KnownElements() const;

  // OK when dims are valid and the element count is within limits.
  absl::Status Validate() const;

  // "[?,1,28,28]"; "[]" for a scalar.
  std::string ToString() const;

  bool operator==(const TensorShape& other) const { return dims_ == other.dims_; }
  bool operator!=(const TensorShape& other) const { return dims_ != other.dims_; }

 private:
  std::vector<int64_t> dims_;
};

// Multiplies with an overflow and kMaxTensorElements check.
absl::StatusOr<int64_t> CheckedElementCount(const std::vector<int64_t>& dims);

// "float32", "int64", ...
std::string DataTypeName(DataType dtype);
// Bytes per element; 0 for DT_INVALID.
int DataTypeSize(DataType dtype);

}  // namespace nereid

#endif  // NEREID_CORE_TENSOR_SHAPE_H_
