#include "compress/layer_bytes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/wire_format.h"
#include "compress/codec.h"
#include "core/status_macros.h"

namespace nereid {

namespace {

double AllReduceShare(int world) { return world > 1 ? 2.0 * (world - 1) / world : 0.0; }

// Bytes per value of an AllReduce's wire format (attribute "wire", float32
// when absent).
absl::StatusOr<int> WireBytes(const Node& allreduce) {
  auto wire = allreduce.def().attr().find("wire");
  if (wire == allreduce.def().attr().end()) return WireBytesPerElement(WireType::kFloat32);
  ASSIGN_OR_RETURN(const WireType type, ParseWireType(wire->second.s()));
  return WireBytesPerElement(type);
}

int64_t InputElements(const Node& n) {
  int64_t elements = 0;
  for (int i = 0; i < n.num_inputs(); ++i) {
    const Edge* e = n.input_edge(i);
    if (e != nullptr) elements += e->src->outputs()[e->src_port].shape.KnownElements();
  }
  return elements;
}

}  // namespace

absl::StatusOr<RingMessage> RingMessageOf(const Node& node, int world) {
  if (node.op() == "AllReduce") {
    ASSIGN_OR_RETURN(const int bytes, WireBytes(node));
    return RingMessage{InputElements(node) * bytes, 1};
  }
  if (node.op() != "CompressedAllReduce") {
    return absl::InvalidArgumentError(absl::StrCat("'", node.name(), "' (", node.op(), ") is not an allreduce"));
  }
  ASSIGN_OR_RETURN(std::vector<LayerBytes> layers, CompressedLayerBytes(node, world));
  double sent = 0;
  RingMessage message;
  for (const LayerBytes& l : layers) {
    sent += l.sent_bytes;
    message.rounds = std::max(message.rounds, l.rounds);
  }
  message.bytes = world > 1 ? static_cast<int64_t>(sent / AllReduceShare(world) + 0.5) : 0;
  return message;
}

absl::StatusOr<std::vector<LayerBytes>> CompressedLayerBytes(const Node& n, int world) {
  const auto& attr = n.def().attr();
  ASSIGN_OR_RETURN(CodecOptions options, CodecOptions::Parse(attr.at("options").s()));
  const int64_t gradients = attr.count("gradients") > 0 ? attr.at("gradients").i() : 1;
  std::vector<std::string> names =
      absl::StrSplit(attr.count("names") > 0 ? attr.at("names").s() : "", ',', absl::SkipEmpty());
  std::vector<LayerBytes> layers;
  for (int64_t g = 0; g < gradients; ++g) {
    ASSIGN_OR_RETURN(std::unique_ptr<GradientCodec> codec, CodecRegistry::Global().Create(attr.at("method").s()));
    const TensorShape& shape = n.outputs()[g].shape;
    RETURN_IF_ERROR(codec->Init(shape.dims(), options));
    LayerBytes l;
    l.name = g < static_cast<int64_t>(names.size()) ? names[g] : absl::StrCat(n.name(), ":", g);
    l.method = attr.at("method").s();
    l.elements = shape.KnownElements();
    l.payload_bytes = codec->PayloadFloats() * 4;
    l.payload_is_bound = codec->variable_length();
    const bool gather = codec->collective() == CodecCollective::kAllGather;
    l.collective = gather ? "allgather" : "allreduce";
    l.sent_bytes = gather ? static_cast<double>(world - 1) * l.payload_bytes : AllReduceShare(world) * l.payload_bytes;
    l.uncompressed_sent_bytes = AllReduceShare(world) * l.elements * 4;
    l.rounds = codec->Rounds();
    layers.push_back(l);
  }
  return layers;
}

absl::StatusOr<std::vector<LayerBytes>> PlanLayerBytes(const Graph& graph, int world) {
  const double allreduce_share = AllReduceShare(world);
  std::vector<LayerBytes> layers;
  LayerBytes dense{"dense buckets", "float32", "allreduce"};
  for (Node* n : graph.nodes()) {
    if (n->op() == "AllReduce") {
      auto wire = n->def().attr().find("wire");
      if (wire != n->def().attr().end()) dense.method = wire->second.s();
      ASSIGN_OR_RETURN(const int bytes_per_value, WireBytes(*n));
      const int64_t elements = InputElements(*n);
      dense.elements += elements;
      dense.payload_bytes += elements * bytes_per_value;
    } else if (n->op() == "CompressedAllReduce") {
      ASSIGN_OR_RETURN(std::vector<LayerBytes> compressed, CompressedLayerBytes(*n, world));
      layers.insert(layers.end(), compressed.begin(), compressed.end());
    }
  }
  if (dense.elements > 0) {
    dense.sent_bytes = allreduce_share * dense.payload_bytes;
    dense.uncompressed_sent_bytes = allreduce_share * dense.elements * 4;
    layers.push_back(dense);
  }
  return layers;
}

}  // namespace nereid
