#ifndef NEREID_GRAPH_ONNX_ONNX_CONVERTER_H_
#define NEREID_GRAPH_ONNX_ONNX_CONVERTER_H_

// How one ONNX op becomes Nereid nodes. Each ONNX op has a converter, in the
// op family's file (*_onnx.cc), registered with the attributes it
// understands; any other attribute on a node is refused before the converter
// runs, so an option the importer would silently drop cannot pass.
//
//   absl::Status ConvertRelu(OnnxNodeContext& c) {
//     c.SetOutput(0, c.AddNode("Relu", {c.Input(0)}));
//     return absl::OkStatus();
//   }
//   NEREID_REGISTER_ONNX_OP("Relu", "", ConvertRelu);
//   NEREID_REGISTER_ONNX_OP("Gemm", "alpha beta transA transB", ConvertGemm);
//
// Errors: Unimplemented for valid ONNX that Nereid cannot express (the
// conformance test counts those as skipped, with the message as reason),
// InvalidArgument for a malformed model.

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/registration.h"
#include "graph/graph.pb.h"
#include "onnx/onnx_pb.h"

namespace nereid {

class OnnxGraphBuilder;

// What a converter sees of one ONNX node and how it adds Nereid nodes.
class OnnxNodeContext {
 public:
  OnnxNodeContext(OnnxGraphBuilder& builder, const onnx::NodeProto& node, int64_t opset)
      : builder_(builder), node_(node), opset_(opset) {}

  const onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }

  // Inputs: ONNX leaves an optional input out or names it "".
  int num_inputs() const { return node_.input_size(); }
  bool HasInput(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  // The Nereid reference ("node" or "node:port") an input resolves to; an
  // initializer becomes a Parameter the first time it is used as data.
  absl::StatusOr<std::string> Input(int i);
  // Like Input, but an initializer becomes a Parameter that is not trained
  // (running statistics).
  absl::StatusOr<std::string> StateInput(int i);
  // The dims ONNX's shape inference found for input i (-1 where unknown), or
  // nullopt when not even the rank is known.
  std::optional<std::vector<int64_t>> InputDims(int i) const;
  std::optional<std::vector<int64_t>> OutputDims(int i) const;
  // Input i's ONNX element type (onnx::TensorProto::FLOAT, INT64, ...), or
  // nullopt when the model does not say.
  std::optional<int32_t> InputElemType(int i) const;
  // The values of a constant input (an initializer or a Constant node's
  // output) as integers or floats; nullopt when it is computed at run time.
  std::optional<std::vector<int64_t>> ConstantInts(int i) const;
  std::optional<std::vector<float>> ConstantFloats(int i) const;
  // Like ConstantInts, but a value folded from shapes may hold unknown
  // entries (a dimension that varies, such as the batch).
  std::optional<std::vector<std::optional<int64_t>>> PartialInts(int i) const;
  // The one value every element of input i holds, when the importer knows it
  // (a constant of equal elements, or zeros expanded to a shape holding the
  // batch: an RNN's initial state).
  std::optional<float> UniformInput(int i) const;
  bool OutputUsed(int i) const;

  // Attributes, with ONNX's defaults.
  bool HasAttr(const std::string& name) const;
  int64_t IntAttr(const std::string& name, int64_t fallback) const;
  float FloatAttr(const std::string& name, float fallback) const;
  std::string StringAttr(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> IntsAttr(const std::string& name) const;
  const onnx::AttributeProto* Attr(const std::string& name) const;

  // Adds a Nereid node named after this ONNX node (`suffix` tells the parts
  // of a many-node conversion apart) and returns its name.
  std::string AddNode(const std::string& op, const std::vector<std::string>& inputs,
                      const google::protobuf::Map<std::string, AttrValue>& attrs = {},
                      const std::string& suffix = "");
  // A scalar float constant, for scaling factors.
  std::string AddScalar(float value, const std::string& suffix);
  // A float constant of `dims` (row-major `values`).
  std::string AddFloatConstant(const std::vector<float>& values, const std::vector<int64_t>& dims,
                               const std::string& suffix);
  // Makes ONNX output i of this node resolve to `nereid_ref`.
  void SetOutput(int i, const std::string& nereid_ref);

  // "ONNX node 'NAME' (OP): what" as Unimplemented / InvalidArgument.
  absl::Status Unsupported(const std::string& what) const;
  absl::Status Malformed(const std::string& what) const;

 private:
  OnnxGraphBuilder& builder_;
  const onnx::NodeProto& node_;
  int64_t opset_;
};

// Attribute values for AddNode.
AttrValue IntAttrValue(int64_t v);
AttrValue FloatAttrValue(float v);
AttrValue StringAttrValue(const std::string& v);
AttrValue BoolAttrValue(bool v);
AttrValue IntsAttrValue(const std::vector<int64_t>& v);

using OnnxConverterFn = std::function<absl::Status(OnnxNodeContext&)>;

struct OnnxConverter {
  std::string op_type;
  std::set<std::string> attributes;  // the attributes the converter reads
  OnnxConverterFn convert;
};

class OnnxConverterRegistry {
 public:
  static OnnxConverterRegistry& Global();
  // `attributes`: the names the converter reads, separated by spaces.
  absl::Status Register(std::string op_type, const std::string& attributes, OnnxConverterFn convert);
  const OnnxConverter* Find(const std::string& op_type) const;
  std::vector<std::string> OpTypes() const;  // sorted

 private:
  absl::flat_hash_map<std::string, OnnxConverter> converters_;
};

}  // namespace nereid

#define NEREID_REGISTER_ONNX_OP(...) NEREID_REGISTER(::nereid::OnnxConverterRegistry, __VA_ARGS__)

#endif  // NEREID_GRAPH_ONNX_ONNX_CONVERTER_H_
