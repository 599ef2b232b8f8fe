#include "core/tensor_proto.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace nereid {

bool IsKnownInitializer(const std::string& kind) {
  static const char* const kKinds[] = {"zeros",     "ones",       "constant",      "uniform",       "normal",
                                       "he_normal", "he_uniform", "glorot_normal", "glorot_uniform"};
  for (const char* k : kKinds) {
    if (kind == k) return true;
  }
  return false;
}

namespace {

// The number of values given, and by which field, or an error if several
// fields carry values.
absl::Status CountValues(const TensorProto& t, int64_t* count, const char** field) {
  int sources = 0;
  *count = 0;
  *field = "nothing";
  auto take = [&](int64_t n, const char* name) {
    if (n == 0) return;
    ++sources;
    *count = n;
    *field = name;
  };
  take(t.float_val_size(), "float_val");
  take(t.double_val_size(), "double_val");
  take(t.int_val_size(), "int_val");
  take(t.int64_val_size(), "int64_val");
  take(t.bool_val_size(), "bool_val");
  if (!t.raw_data().empty()) {
    int size = DataTypeSize(t.dtype());
    if (size == 0 || t.raw_data().size() % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor raw_data has ", t.raw_data().size(),
                                                     " bytes, not a whole number of ",
                                                     DataTypeName(t.dtype()), " values"));
    }
    take(static_cast<int64_t>(t.raw_data().size()) / size, "raw_data");
  }
  if (sources > 1) {
    return absl::InvalidArgumentError("tensor carries values in more than one field; use exactly one");
  }
  return absl::OkStatus();
}

bool FieldMatchesDtype(const char* field, DataType dtype) {
  std::string f = field;
  if (f == "raw_data") return true;
  if (f == "float_val") return dtype == DT_FLOAT || dtype == DT_HALF || dtype == DT_BFLOAT16;
  if (f == "double_val") return dtype == DT_DOUBLE;
  if (f == "int_val") return dtype == DT_INT32 || dtype == DT_UINT8;
  if (f == "int64_val") return dtype == DT_INT64;
  if (f == "bool_val") return dtype == DT_BOOL;
  return false;
}

}  // namespace

absl::StatusOr<TensorShape> ValidateTensorProto(const TensorProto& tensor, const TensorShape* expected) {
  if (tensor.dtype() == DT_INVALID) {
    return absl::InvalidArgumentError("tensor has no dtype (set dtype: DT_FLOAT, ...)");
  }
  TensorShape shape;
  if (tensor.has_shape()) {
    auto parsed = TensorShape::FromProto(tensor.shape());
    if (!parsed.ok()) return parsed.status();
    shape = *parsed;
    if (!shape.IsFullyDefined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor shape ", shape.ToString(), " has an unknown dimension; a tensor's shape "
                       "must be fully known"));
    }
    if (expected != nullptr && shape != *expected) {
      return absl::InvalidArgumentError(absl::StrCat("tensor shape ", shape.ToString(),
                                                     " does not match the declared shape ",
                                                     expected->ToString()));
    }
  } else if (expected != nullptr) {
    shape = *expected;
  }
  int64_t count;
  const char* field;
  absl::Status status = CountValues(tensor, &count, &field);
  if (!status.ok()) return status;
  bool has_init = tensor.has_init();
  if (has_init && count > 0) {
    return absl::InvalidArgumentError("tensor has both values and an initialiser; use one");
  }
  if (has_init) {
    if (!IsKnownInitializer(tensor.init().kind())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown initialiser '", tensor.init().kind(),
          "' (known: zeros, ones, constant, uniform, normal, he_normal, he_uniform, glorot_normal, "
          "glorot_uniform)"));
    }
    return shape;
  }
  if (!FieldMatchesDtype(field, tensor.dtype()) && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of dtype ", DataTypeName(tensor.dtype()),
                                                   " carries its values in ", field));
  }
  int64_t elements = shape.KnownElements();
  if (count != elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor data has ", count, " values but its shape ",
                                                   shape.ToString(), " holds ", elements));
  }
  return shape;
}

}  // namespace nereid
