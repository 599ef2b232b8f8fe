#ifndef NEREID_GRAPH_ONNX_SHAPE_FOLDING_H_
#define NEREID_GRAPH_ONNX_SHAPE_FOLDING_H_

// The shape arithmetic exporters emit around a model's real work, computed at
// import. torch.onnx.export writes `x.view(x.size(0), T, H, D)` as
//   Shape(x) -> Gather(0) -> Unsqueeze -> Concat(.., T, H, D) -> Reshape
// and an RNN's zero initial state as Shape -> Gather -> Concat ->
// ConstantOfShape / Expand. When the values feeding such a node are known (constants,
// or the dims ONNX's shape inference found), its output is folded here
// into a value: no Nereid node is made for it, and the converter that
// finally consumes it (Reshape's target, Slice's bounds) reads it as a
// constant. A dimension that varies (the batch while training) is carried as
// unknown; Reshape turns one unknown entry into -1.
//
// Folded values are small integer tensors (shapes, indices), or constant
// tensors made by ConstantOfShape / Range; every result is bounded by
// kMaxFoldedElements, so a model cannot make the importer allocate without
// limit.

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace nereid {

inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

// In the dims the folder is given: the batch while training (ONNX's symbol
// nereid_batch), as opposed to -1, any other unknown dimension.
inline constexpr int64_t kBatchDim = -2;

// A value known at import: its dims and its elements as doubles (exact for
// integers below 2^53); NaN where an element is unknown, +inf where it is the
// batch (copied from a shape, never computed from it).
struct FoldedValue {
  int32_t elem_type = onnx::TensorProto::INT64;
  std::vector<int64_t> dims;
  std::vector<double> values;
  // A tensor of one repeated value whose size varies (an RNN's zero state,
  // ConstantOfShape / Expand to a shape holding the batch): `dims` holds -1
  // there and `values` is empty.
  std::optional<double> uniform;

  bool FullyKnown() const;
  int64_t num_elements() const;
  // As an ONNX tensor (only when fully known).
  onnx::TensorProto ToTensor(const std::string& name) const;
  static absl::StatusOr<FoldedValue> FromTensor(const onnx::TensorProto& tensor);
};

// What the folder can look up about a node's inputs.
struct FoldingInputs {
  // A known value (a constant, or an earlier fold), or nullopt.
  std::function<std::optional<FoldedValue>(const std::string&)> value;
  // The dims shape inference found (-1 where unknown), or nullopt.
  std::function<std::optional<std::vector<int64_t>>(const std::string&)> dims;
};

// Whether TryFold evaluates `op_type` at all (when its inputs are known).
bool IsFoldableOp(const std::string& op_type);

// The outputs of `node` when they can be computed at import; nullopt when
// the node must be converted (an op the folder does not evaluate, or an
// input that is not known). An error is a malformed node.
absl::StatusOr<std::optional<std::vector<FoldedValue>>> TryFold(const onnx::NodeProto& node,
                                                                const FoldingInputs& inputs);

}  // namespace nereid

#endif  // NEREID_GRAPH_ONNX_SHAPE_FOLDING_H_
