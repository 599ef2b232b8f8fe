// ONNX Gemm and MatMul -> MatMul (+ BiasAdd / Add, + Mul for alpha and beta);
// MatMul of higher rank (an nn.Linear on [B, T, K], attention) -> BatchMatMul.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/onnx/onnx_converter.h"

namespace nereid {
namespace {

absl::Status RequireMatrix(OnnxNodeContext& c, int i) {
  std::optional<std::vector<int64_t>> dims = c.InputDims(i);
  if (dims && dims->size() != 2) {
    return c.Unsupported(absl::StrCat("input ", i, " has rank ", dims->size(), "; Nereid's MatMul takes matrices"));
  }
  return absl::OkStatus();
}

// Y = alpha * op(A) @ op(B) + beta * C. A one-dimensional C of the output's
// width is a bias (BiasAdd, whose gradient sums over the batch); any other C
// broadcasts through Add.
absl::Status ConvertGemm(OnnxNodeContext& c) {
  RETURN_IF_ERROR(RequireMatrix(c, 0));
  RETURN_IF_ERROR(RequireMatrix(c, 1));
  ASSIGN_OR_RETURN(std::string a, c.Input(0));
  ASSIGN_OR_RETURN(std::string b, c.Input(1));
  google::protobuf::Map<std::string, AttrValue> attrs;
  if (c.IntAttr("transA", 0) != 0) attrs["transpose_a"] = BoolAttrValue(true);
  if (c.IntAttr("transB", 0) != 0) attrs["transpose_b"] = BoolAttrValue(true);
  const float alpha = c.FloatAttr("alpha", 1.0f);
  const float beta = c.FloatAttr("beta", 1.0f);
  const bool has_c = c.HasInput(2) && beta != 0.0f;
  std::string y = c.AddNode("MatMul", {a, b}, attrs, has_c || alpha != 1.0f ? "matmul" : "");
  if (alpha != 1.0f) y = c.AddNode("Mul", {y, c.AddScalar(alpha, "alpha")}, {}, has_c ? "scale" : "");
  if (has_c) {
    ASSIGN_OR_RETURN(std::string bias, c.Input(2));
    if (beta != 1.0f) bias = c.AddNode("Mul", {bias, c.AddScalar(beta, "beta")}, {}, "scaled_c");
    std::optional<std::vector<int64_t>> c_dims = c.InputDims(2);
    std::optional<std::vector<int64_t>> y_dims = c.OutputDims(0);
    const bool is_bias = c_dims && y_dims && c_dims->size() == 1 && y_dims->size() == 2 &&
                         (*c_dims)[0] == (*y_dims)[1] && (*c_dims)[0] > 1;
    y = c.AddNode(is_bias ? "BiasAdd" : "Add", {y, bias});
  }
  c.SetOutput(0, y);
  return absl::OkStatus();
}

absl::Status ConvertMatMul(OnnxNodeContext& c) {
  bool matrices = true;
  for (int i = 0; i < 2; ++i) {
    std::optional<std::vector<int64_t>> dims = c.InputDims(i);
    if (!dims) return c.Unsupported(absl::StrCat("the rank of input ", i, " is unknown"));
    if (dims->size() < 2) {
      return c.Unsupported(absl::StrCat("input ", i, " is a vector (rank ", dims->size(),
                                        "); Nereid multiplies matrices and batches of them"));
    }
    matrices = matrices && dims->size() == 2;
  }
  ASSIGN_OR_RETURN(std::string a, c.Input(0));
  ASSIGN_OR_RETURN(std::string b, c.Input(1));
  c.SetOutput(0, c.AddNode(matrices ? "MatMul" : "BatchMatMul", {a, b}));
  return absl::OkStatus();
}

}  // namespace

NEREID_REGISTER_ONNX_OP("Gemm", "alpha beta transA transB", ConvertGemm);
NEREID_REGISTER_ONNX_OP("MatMul", "", ConvertMatMul);

}  // namespace nereid
