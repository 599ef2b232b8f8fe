#include "core/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/buffer_pool.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"

namespace nereid {

std::string DimsToString(const std::vector<int64_t>& dims) { return absl::StrCat("[", absl::StrJoin(dims, ","), "]"); }

absl::StatusOr<Tensor> Tensor::Allocate(DataType dtype, std::vector<int64_t> dims) {
  if (DataTypeSize(dtype) == 0) return absl::InvalidArgumentError("cannot allocate a tensor of an invalid dtype");
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("cannot allocate a tensor of dims ", DimsToString(dims)));
  }
  ASSIGN_OR_RETURN(int64_t n, CheckedElementCount(dims));
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.num_elements_ = n;
  if (n > 0) {
    t.buffer_ = BufferPool::Global().Allocate(static_cast<size_t>(n) * DataTypeSize(dtype));
    if (t.buffer_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("out of memory allocating ", t.DebugString()));
    }
  }
  return t;
}

Tensor Tensor::Wrap(DataType dtype, std::vector<int64_t> dims, std::shared_ptr<void> buffer) {
  Tensor t;
  t.dtype_ = dtype;
  t.num_elements_ = 1;
  for (int64_t d : dims) t.num_elements_ *= d;
  t.dims_ = std::move(dims);
  t.buffer_ = std::move(buffer);
  return t;
}

Tensor Tensor::ViewOf(const Tensor& other) {
  return Wrap(other.dtype_, other.dims_, std::shared_ptr<void>(std::shared_ptr<void>(), other.buffer_.get()));
}

absl::StatusOr<Tensor> Tensor::Zeros(DataType dtype, std::vector<int64_t> dims) {
  ASSIGN_OR_RETURN(Tensor t, Allocate(dtype, std::move(dims)));
  if (t.num_elements_ > 0) std::memset(t.raw(), 0, t.num_bytes());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromVector(std::vector<int64_t> dims, const std::vector<float>& values) {
  ASSIGN_OR_RETURN(Tensor t, Allocate(DT_FLOAT, std::move(dims)));
  if (static_cast<int64_t>(values.size()) != t.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat(values.size(), " values given for a tensor of dims ", DimsToString(t.dims())));
  }
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

int64_t Tensor::num_bytes() const { return num_elements_ * DataTypeSize(dtype_); }

absl::StatusOr<Tensor> Tensor::Reshaped(std::vector<int64_t> dims) const {
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("cannot reshape to dims ", DimsToString(dims)));
  }
  ASSIGN_OR_RETURN(int64_t n, CheckedElementCount(dims));
  if (n != num_elements_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", DebugString(), " to ", DimsToString(dims),
                                                   ": ", num_elements_, " vs ", n, " elements"));
  }
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  ASSIGN_OR_RETURN(Tensor t, Allocate(dtype_, dims_));
  if (num_elements_ > 0) std::memcpy(t.raw(), raw(), num_bytes());
  return t;
}

std::string Tensor::DebugString() const { return absl::StrCat(DataTypeName(dtype_), DimsToString(dims_)); }

bool Tensor::BitwiseEquals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || dims_ != other.dims_) return false;
  return num_elements_ == 0 || std::memcmp(raw(), other.raw(), num_bytes()) == 0;
}

}  // namespace nereid
