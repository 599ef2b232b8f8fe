#include "graph/onnx/inference_guard.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nereid {
namespace {

// Subgraphs nest; a model deeper than this is refused rather than recursed.
constexpr int kMaxSubgraphDepth = 64;

// Attributes that shape inference divides by or sizes loops with: each
// value must be at least 1.
bool MustBePositive(const std::string& name) {
  return name == "strides" || name == "dilations" || name == "kernel_shape" || name == "blocksize" ||
         name == "group";
}

absl::Status CheckGraph(const onnx::GraphProto& graph, const std::string& source, int depth);

absl::Status CheckNodes(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes, const std::string& source,
                        int depth) {
  if (depth > kMaxSubgraphDepth) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": subgraphs nested deeper than ", kMaxSubgraphDepth));
  }
  for (const onnx::NodeProto& node : nodes) {
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (MustBePositive(attr.name())) {
        bool positive = true;
        for (int64_t v : attr.ints()) positive = positive && v >= 1;
        if (attr.has_i()) positive = positive && attr.i() >= 1;
        if (!positive) {
          return absl::InvalidArgumentError(absl::StrCat(
              source, ": node '", node.name(), "' (", node.op_type(), ") has ", attr.name(), " ",
              attr.ints_size() > 0 ? absl::StrCat("[", absl::StrJoin(attr.ints(), ", "), "]") : absl::StrCat(attr.i()),
              ": every value must be at least 1"));
        }
      }
      if (attr.has_g()) {
        if (absl::Status s = CheckGraph(attr.g(), source, depth + 1); !s.ok()) return s;
      }
      for (const onnx::GraphProto& g : attr.graphs()) {
        if (absl::Status s = CheckGraph(g, source, depth + 1); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGraph(const onnx::GraphProto& graph, const std::string& source, int depth) {
  return CheckNodes(graph.node(), source, depth);
}

}  // namespace

absl::Status CheckAttributesBeforeInference(const onnx::ModelProto& model, const std::string& source) {
  if (absl::Status s = CheckGraph(model.graph(), source, 0); !s.ok()) return s;
  for (const onnx::FunctionProto& function : model.functions()) {
    if (absl::Status s = CheckNodes(function.node(), source, 0); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace nereid
