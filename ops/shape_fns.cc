#include "ops/shape_fns.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {
namespace shape_fns {

absl::StatusOr<std::vector<ShapeAndType>> UnchangedShape(const InferenceContext& c) {
  return std::vector<ShapeAndType>{{c.input_shape(0), c.input_dtype(0)}};
}

absl::StatusOr<std::vector<ShapeAndType>> Single(TensorShape shape, DataType dtype) {
  absl::Status status = shape.Validate();
  if (!status.ok()) return status;
  return std::vector<ShapeAndType>{{std::move(shape), dtype}};
}

std::string DescribeInput(const InferenceContext& c, int i) {
  return absl::StrCat("input '", c.op_def().InputName(i), "' ", c.input_shape(i).ToString());
}

absl::Status RequireRank(const InferenceContext& c, int i, int rank, absl::string_view what) {
  if (c.input_shape(i).rank() == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(DescribeInput(c, i), " must have rank ", rank,
                                                 what.empty() ? "" : absl::StrCat(" (", what, ")")));
}

absl::Status RequireSameDtype(const InferenceContext& c, int i, int j) {
  if (c.input_dtype(i) == c.input_dtype(j)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      DescribeInput(c, i), " is ", DataTypeName(c.input_dtype(i)), " but ", DescribeInput(c, j),
      " is ", DataTypeName(c.input_dtype(j)), "; they must have the same dtype"));
}

absl::StatusOr<int> AxisAttr(const InferenceContext& c, absl::string_view name) {
  const int rank = c.input_shape(0).rank();
  const int64_t given = c.GetInt(name);
  const int64_t axis = given < 0 ? given + rank : given;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' ", given, " is out of range for ", DescribeInput(c, 0)));
  }
  return static_cast<int>(axis);
}

bool DimsAgree(int64_t a, int64_t b) { return a == b || a == kUnknownDim || b == kUnknownDim; }

absl::StatusOr<int64_t> MultiplyDims(int64_t a, int64_t b) {
  if (a == kUnknownDim || b == kUnknownDim) return kUnknownDim;
  return CheckedElementCount({a, b});
}

absl::StatusOr<TensorShape> Broadcast(const TensorShape& a, const TensorShape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(rank);
  for (int k = 0; k < rank; ++k) {
    int ia = a.rank() - rank + k, ib = b.rank() - rank + k;
    int64_t da = ia >= 0 ? a.dim(ia) : 1;
    int64_t db = ib >= 0 ? b.dim(ib) : 1;
    if (da == 1) {
      out[k] = db;
    } else if (db == 1 || da == db) {
      out[k] = da;
    } else if (da == kUnknownDim || db == kUnknownDim) {
      out[k] = da == kUnknownDim ? db : da;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", a.ToString(), " and ", b.ToString(),
                                                     " do not broadcast (dimension ", k, ": ", da,
                                                     " vs ", db, ")"));
    }
  }
  return TensorShape(std::move(out));
}

absl::StatusOr<std::vector<int64_t>> PairAttr(const InferenceContext& c, absl::string_view name) {
  std::vector<int64_t> v = c.GetIntList(name);
  if (v.size() != 2 || v[0] <= 0 || v[1] <= 0 || v[0] > kMaxWindowValue || v[1] > kMaxWindowValue) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be two positive ints (height, width) "
                                                   "of at most ", kMaxWindowValue, ", got [",
                                                   absl::StrJoin(v, ","), "]"));
  }
  return v;
}

absl::StatusOr<Window> ReadWindow(const InferenceContext& c, std::vector<int64_t> size) {
  Window w;
  w.size = std::move(size);
  auto stride = PairAttr(c, "strides");
  if (!stride.ok()) return stride.status();
  w.stride = *stride;
  w.dilation = {1, 1};
  if (c.op_def().FindAttr("dilations") != nullptr) {
    auto dilation = PairAttr(c, "dilations");
    if (!dilation.ok()) return dilation.status();
    w.dilation = *dilation;
  }
  const std::string& padding = c.GetString("padding");
  std::vector<int64_t> pads = c.GetIntList("pads");
  if (padding == "EXPLICIT") {
    if (pads.size() != 4 || *std::min_element(pads.begin(), pads.end()) < 0 ||
        *std::max_element(pads.begin(), pads.end()) > kMaxWindowValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("padding EXPLICIT needs 'pads' as four non-negative ints (top, bottom, left, "
                       "right) of at most ", kMaxWindowValue, ", got [",
                       absl::StrJoin(pads, ","), "]"));
    }
    w.pads = pads;
  } else {
    if (!pads.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'pads' is only used with padding EXPLICIT (padding is ", padding, ")"));
    }
    w.pads = {0, 0, 0, 0};
  }
  return w;
}

absl::StatusOr<int64_t> WindowOutputSize(const InferenceContext& c, int64_t in, int axis,
                                         const Window& w) {
  if (in == kUnknownDim) return kUnknownDim;
  const char* axis_name = axis == 0 ? "height" : "width";
  int64_t effective = (w.size[axis] - 1) * w.dilation[axis] + 1;
  if (c.GetString("padding") == "SAME") {
    return (in + w.stride[axis] - 1) / w.stride[axis];
  }
  int64_t padded = in + w.pads[2 * axis] + w.pads[2 * axis + 1];
  if (padded < effective) {
    return absl::InvalidArgumentError(absl::StrCat("the ", effective, "-wide window does not fit the ",
                                                   axis_name, " of ", DescribeInput(c, 0),
                                                   " (padded ", axis_name, " ", padded, ")"));
  }
  return (padded - effective) / w.stride[axis] + 1;
}

}  // namespace shape_fns

namespace cost_fns {

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) return INT64_MAX;
  return product;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return INT64_MAX;
  return sum;
}

int64_t OneFlopPerOutput(const InferenceContext&, const std::vector<ShapeAndType>& outputs) {
  return outputs[0].shape.KnownElements();
}

int64_t NoFlops(const InferenceContext&, const std::vector<ShapeAndType>&) { return 0; }

CostFn FlopsPerOutput(int64_t n) {
  return [n](const InferenceContext&, const std::vector<ShapeAndType>& outputs) {
    return SaturatingMul(n, outputs[0].shape.KnownElements());
  };
}

}  // namespace cost_fns
}  // namespace nereid
