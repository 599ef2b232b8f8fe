#include "core/tensor_slice.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace nereid {

absl::StatusOr<Tensor> SliceAlongAxis(const Tensor& full, int axis, int64_t index, int64_t count) {
  if (axis < 0 || axis >= full.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is outside a tensor of rank ", full.rank(), " (", full.DebugString(), ")"));
  }
  if (count < 1 || full.dim(axis) % count != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dimension ", axis, " of ", full.DebugString(),
                                                   " cannot be cut into ", count, " equal blocks"));
  }
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("block ", index, " is outside [0, ", count, ")"));
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= full.dim(i);
  for (int i = axis + 1; i < full.rank(); ++i) inner *= full.dim(i);
  const int64_t block = full.dim(axis) / count;
  std::vector<int64_t> dims = full.dims();
  dims[axis] = block;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(full.dtype(), dims));
  const int64_t element = full.num_elements() > 0 ? full.num_bytes() / full.num_elements() : 0;
  const char* from = static_cast<const char*>(full.raw());
  char* to = static_cast<char*>(out.raw());
  const int64_t run = block * inner * element;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(to + o * run, from + (o * full.dim(axis) + index * block) * inner * element, run);
  }
  return out;
}

}  // namespace nereid
