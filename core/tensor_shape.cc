#include "core/tensor_shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {

absl::StatusOr<int64_t> CheckedElementCount(const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d == kUnknownDim) continue;
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative dimension ", d, " in shape [",
                                                     absl::StrJoin(dims, ","), "]"));
    }
    int64_t next;
    if (__builtin_mul_overflow(count, d, &next) || next > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(dims, ","), "] has more than ", kMaxTensorElements,
          " elements (the limit for one tensor); refusing it before allocating"));
    }
    count = next;
  }
  return count;
}

absl::StatusOr<TensorShape> TensorShape::FromProto(const TensorShapeProto& proto) {
  TensorShape shape(std::vector<int64_t>(proto.dim().begin(), proto.dim().end()));
  absl::Status status = shape.Validate();
  if (!status.ok()) return status;
  return shape;
}

TensorShapeProto TensorShape::ToProto() const {
  TensorShapeProto proto;
  for (int64_t d : dims_) proto.add_dim(d);
  return proto;
}

absl::Status TensorShape::Validate() const {
  if (rank() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ToString(), " has rank ", rank(), "; at most ", kMaxRank, " is supported"));
  }
  return CheckedElementCount(dims_).status();
}

bool TensorShape::IsFullyDefined() const {
  for (int64_t d : dims_) {
    if (d == kUnknownDim) return false;
  }
  return true;
}

int64_t TensorShape::KnownElements() const {
  int64_t count = 1;
  for (int64_t d : dims_) {
    if (d != kUnknownDim) count *= d;
  }
  return count;
}

std::string TensorShape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dims_, ",", [](std::string* out, int64_t d) {
                        absl::StrAppend(out, d == kUnknownDim ? "?" : absl::StrCat(d));
                      }),
                      "]");
}

std::string DataTypeName(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT: return "float32";
    case DT_DOUBLE: return "float64";
    case DT_HALF: return "float16";
    case DT_BFLOAT16: return "bfloat16";
    case DT_INT32: return "int32";
    case DT_INT64: return "int64";
    case DT_BOOL: return "bool";
    case DT_UINT8: return "uint8";
    default: return "invalid";
  }
}

int DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT: return 4;
    case DT_DOUBLE: return 8;
    case DT_HALF: return 2;
    case DT_BFLOAT16: return 2;
    case DT_INT32: return 4;
    case DT_INT64: return 8;
    case DT_BOOL: return 1;
    case DT_UINT8: return 1;
    default: return 0;
  }
}

}  // namespace nereid
