#ifndef NEREID_CORE_TENSOR_H_
#define NEREID_CORE_TENSOR_H_

// A run-time tensor: a dtype, concrete dims and a reference-counted aligned
// buffer from the BufferPool. Copying a Tensor shares the buffer (reshapes and
// Identity cost nothing); the buffer goes back to the pool when the last
// Tensor referring to it is gone, which is how the executor frees an
// activation once its last consumer has run.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.pb.h"

namespace nereid {

class Tensor {
 public:
  Tensor() = default;

  // Allocates an uninitialised tensor; fails (instead of allocating) when the
  // dims are negative or hold more than kMaxTensorElements.
  static absl::StatusOr<Tensor> Allocate(DataType dtype, std::vector<int64_t> dims);
  // Allocates and fills with zeros.
  static absl::StatusOr<Tensor> Zeros(DataType dtype, std::vector<int64_t> dims);
  // A tensor over memory the caller owns or manages: `buffer` holds at least
  // dims' elements of `dtype`, and its deleter (if any) runs when the last
  // Tensor sharing it is gone (a device block goes back to its allocator).
  // A null-owner `buffer` (std::shared_ptr<void>(std::shared_ptr<void>(), p))
  // makes a view that keeps nothing alive.
  static Tensor Wrap(DataType dtype, std::vector<int64_t> dims, std::shared_ptr<void> buffer);
  // A view of `other`'s data that does not keep its buffer alive.
  static Tensor ViewOf(const Tensor& other);
  // A float32 tensor holding `values` (tests and initialisers).
  static absl::StatusOr<Tensor> FromVector(std::vector<int64_t> dims, const std::vector<float>& values);

  bool valid() const { return buffer_ != nullptr || num_elements_ == 0; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t num_elements() const { return num_elements_; }
  int64_t num_bytes() const;

  template <typename T>
  T* data() { return static_cast<T*>(buffer_.get()); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(buffer_.get()); }
  const void* raw() const { return buffer_.get(); }
  void* raw() { return buffer_.get(); }

  // The same buffer seen with other dims (same element count).
  absl::StatusOr<Tensor> Reshaped(std::vector<int64_t> dims) const;
  // A fresh tensor with a copy of the data.
  absl::StatusOr<Tensor> Clone() const;

  // "float32[64,1,28,28]".
  std::string DebugString() const;

  // Whether the data of two tensors is bitwise equal (dtype and dims too).
  bool BitwiseEquals(const Tensor& other) const;

 private:
  DataType dtype_ = DT_INVALID;
  std::vector<int64_t> dims_;
  int64_t num_elements_ = 0;
  std::shared_ptr<void> buffer_;
};

// "[64,1,28,28]".
std::string DimsToString(const std::vector<int64_t>& dims);

}  // namespace nereid

#endif  // NEREID_CORE_TENSOR_H_
