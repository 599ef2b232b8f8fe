#ifndef NEREID_OPS_SHAPE_FNS_H_
#define NEREID_OPS_SHAPE_FNS_H_

// Building blocks that several ops' shape and cost functions share.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "ops/op_registry.h"

namespace nereid {
namespace shape_fns {

// Strides, window sizes, dilations and pads above this are refused, which
// keeps window arithmetic far from overflow.
inline constexpr int64_t kMaxWindowValue = int64_t{1} << 31;

// The output has input 0's shape and dtype.
absl::StatusOr<std::vector<ShapeAndType>> UnchangedShape(const InferenceContext& c);

// One output of the given shape and dtype, after checking the shape's limits.
absl::StatusOr<std::vector<ShapeAndType>> Single(TensorShape shape, DataType dtype);

// Fails unless input `i` has rank `rank`: "input 'x' must have rank 4 (NCHW), got [?,784]".
absl::Status RequireRank(const InferenceContext& c, int i, int rank, absl::string_view what = "");
// Fails unless inputs `i` and `j` have the same dtype.
absl::Status RequireSameDtype(const InferenceContext& c, int i, int j);

// The int attribute `name` as an axis of input 0 (negative: from the end),
// in [0, rank); the error names the attribute and the input.
absl::StatusOr<int> AxisAttr(const InferenceContext& c, absl::string_view name);

// Two dims agree when equal or when either is unknown.
bool DimsAgree(int64_t a, int64_t b);
// a * b with overflow and kMaxTensorElements checks; unknown stays unknown.
absl::StatusOr<int64_t> MultiplyDims(int64_t a, int64_t b);

// NumPy broadcasting of two shapes; the error names both.
absl::StatusOr<TensorShape> Broadcast(const TensorShape& a, const TensorShape& b);

// Reads a 2-element positive list attribute (strides, ksize, dilations).
absl::StatusOr<std::vector<int64_t>> PairAttr(const InferenceContext& c, absl::string_view name);

// Spatial window geometry shared by Conv2D and the pools (NCHW).
struct Window {
  std::vector<int64_t> size;      // kh, kw
  std::vector<int64_t> stride;    // sh, sw
  std::vector<int64_t> dilation;  // dh, dw
  std::vector<int64_t> pads;      // top, bottom, left, right
};
// Reads strides, padding ("VALID", "SAME", "EXPLICIT") and pads; `dilations`
// is read when the op declares it.
absl::StatusOr<Window> ReadWindow(const InferenceContext& c, std::vector<int64_t> size);
// The output size of one spatial dimension, or an error naming the input size
// and the window when the window does not fit.
absl::StatusOr<int64_t> WindowOutputSize(const InferenceContext& c, int64_t in, int axis,
                                         const Window& w);

// "input 'x' [?,784]" for error messages.
std::string DescribeInput(const InferenceContext& c, int i);

}  // namespace shape_fns

namespace cost_fns {

// FLOP counts saturate at INT64_MAX instead of overflowing.
int64_t SaturatingMul(int64_t a, int64_t b);
int64_t SaturatingAdd(int64_t a, int64_t b);

// One operation per output element (elementwise ops).
int64_t OneFlopPerOutput(const InferenceContext& c, const std::vector<ShapeAndType>& outputs);
// Moves no arithmetic (reshapes, parameters, constants).
int64_t NoFlops(const InferenceContext& c, const std::vector<ShapeAndType>& outputs);
// `n` operations per output element.
CostFn FlopsPerOutput(int64_t n);

}  // namespace cost_fns
}  // namespace nereid

#endif  // NEREID_OPS_SHAPE_FNS_H_
