#include "graph/onnx/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"
#include "graph/graph_io.h"
#include "graph/onnx/inference_guard.h"
#include "graph/onnx/onnx_converter.h"
#include "graph/onnx/shape_folding.h"
#include "onnx/shape_inference/implementation.h"

namespace nereid {
namespace {

// The symbol the batch dimension gets while training (it varies).
constexpr char kBatchSymbol[] = "nereid_batch";

bool HasNonFinite(const TensorProto& t) {
  const std::string& raw = t.raw_data();
  for (size_t i = 0; i + sizeof(float) <= raw.size(); i += sizeof(float)) {
    float v;
    std::memcpy(&v, raw.data() + i, sizeof(float));
    if (!std::isfinite(v)) return true;
  }
  for (float v : t.float_val()) {
    if (!std::isfinite(v)) return true;
  }
  return false;
}

}  // namespace

// Holds the graph being built and what the converters look up: which Nereid
// output each ONNX value is, the initializers and Constant values not yet
// turned into nodes, and the dims shape inference found.
class OnnxGraphBuilder {
 public:
  OnnxGraphBuilder(const onnx::GraphProto& graph, std::string source) : source_(std::move(source)) {
    for (const onnx::TensorProto& t : graph.initializer()) constants_[t.name()] = &t;
    for (const onnx::NodeProto& node : graph.node()) {
      if (node.op_type() != "Constant") continue;
      for (const onnx::AttributeProto& a : node.attribute()) {
        if (a.name() == "value" && a.has_t() && node.output_size() == 1) constants_[node.output(0)] = &a.t();
      }
      for (const std::string& out : node.output()) constant_nodes_.insert(out);
    }
    for (const onnx::NodeProto& node : graph.node()) {
      for (const std::string& in : node.input()) used_.insert(in);
    }
    for (const onnx::ValueInfoProto& v : graph.output()) used_.insert(v.name());
    auto record = [&](const onnx::ValueInfoProto& v) {
      if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
      std::vector<int64_t> dims;
      for (const auto& d : v.type().tensor_type().shape().dim()) {
        dims.push_back(d.has_dim_value() ? d.dim_value() : d.dim_param() == kBatchSymbol ? kBatchDim : -1);
      }
      dims_[v.name()] = std::move(dims);
    };
    auto record_type = [&](const onnx::ValueInfoProto& v) {
      if (v.type().has_tensor_type()) types_[v.name()] = v.type().tensor_type().elem_type();
    };
    for (const auto& v : graph.input()) record_type(v);
    for (const auto& v : graph.value_info()) record_type(v);
    for (const auto& v : graph.output()) record_type(v);
    for (const auto& v : graph.input()) record(v);
    for (const auto& v : graph.value_info()) record(v);
    for (const auto& v : graph.output()) record(v);
    for (const onnx::TensorProto& t : graph.initializer()) {
      dims_[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
      types_[t.name()] = t.data_type();
    }
  }

  const std::string& source() const { return source_; }
  GraphDef& def() { return def_; }

  // A node name nobody has taken, from an ONNX name.
  std::string UniqueName(const std::string& wanted) {
    const std::string name = OnnxNameToNodeName(wanted);
    std::string candidate = name;
    for (int i = 1; names_.contains(candidate); ++i) candidate = absl::StrCat(name, "_", i);
    names_.insert(candidate);
    return candidate;
  }

  NodeDef* AddNode(const std::string& name, const std::string& op) {
    NodeDef* node = def_.add_node();
    node->set_name(UniqueName(name));
    node->set_op(op);
    return node;
  }

  void SetRef(const std::string& value, const std::string& ref) { refs_[value] = ref; }

  absl::StatusOr<std::string> Resolve(const std::string& value, bool trainable) {
    auto it = refs_.find(value);
    if (it != refs_.end()) return it->second;
    auto c = constants_.find(value);
    if (c == constants_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ": value '", value, "' is used before any node produces it (nodes must be in topological order)"));
    }
    absl::StatusOr<TensorProto> tensor = FromOnnxTensor(*c->second);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(), absl::StrCat(source_, ": tensor '", value, "': ", tensor.status().message()));
    }
    NodeDef* node;
    // A float initializer is a trained Parameter, unless it holds values no
    // parameter can (an attention mask's -inf, registered by PyTorch as a
    // buffer): a constant.
    if (constant_nodes_.contains(value) || (tensor->dtype() == DT_FLOAT && HasNonFinite(*tensor))) {
      node = AddNode(value, "Const");
      *(*node->mutable_attr())["value"].mutable_tensor() = *tensor;
    } else {
      node = AddNode(value, "Parameter");
      AttrValue& shape = (*node->mutable_attr())["shape"];
      *shape.mutable_shape() = tensor->shape();
      if (tensor->dtype() != DT_FLOAT) (*node->mutable_attr())["dtype"].set_type(tensor->dtype());
      *(*node->mutable_attr())["init"].mutable_tensor() = *tensor;
      if (!trainable || tensor->dtype() != DT_FLOAT) (*node->mutable_attr())["trainable"].set_b(false);
    }
    refs_[value] = node->name();
    return node->name();
  }

  std::optional<std::vector<int64_t>> Dims(const std::string& value) const {
    auto it = dims_.find(value);
    if (it == dims_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<int32_t> ElemType(const std::string& value) const {
    auto it = types_.find(value);
    if (it != types_.end()) return it->second;
    const onnx::TensorProto* constant = Constant(value);
    if (constant != nullptr) return constant->data_type();
    return std::nullopt;
  }
  const onnx::TensorProto* Constant(const std::string& value) const {
    auto it = constants_.find(value);
    return it == constants_.end() ? nullptr : it->second;
  }
  bool Used(const std::string& value) const { return used_.contains(value); }

  // What the shape folder may treat as known: values of Constant nodes,
  // integer initializers (never trained), and earlier folds. A float
  // initializer is a Parameter that training changes, never a constant.
  std::optional<FoldedValue> Known(const std::string& value) const {
    auto folded = folded_.find(value);
    if (folded != folded_.end()) return folded->second;
    const onnx::TensorProto* t = Constant(value);
    if (t == nullptr) return std::nullopt;
    const bool integer = t->data_type() == onnx::TensorProto::INT64 || t->data_type() == onnx::TensorProto::INT32 ||
                         t->data_type() == onnx::TensorProto::BOOL;
    if (!constant_nodes_.contains(value) && !integer) return std::nullopt;
    absl::StatusOr<FoldedValue> v = FoldedValue::FromTensor(*t);
    if (!v.ok()) return std::nullopt;
    return *std::move(v);
  }
  FoldingInputs Folding() const {
    return FoldingInputs{[this](const std::string& v) { return Known(v); },
                         [this](const std::string& v) { return Dims(v); }};
  }
  // Records a folded node's outputs; fully known ones become constants that
  // a Const node holds if anything uses them as data.
  void RecordFolded(const onnx::NodeProto& node, std::vector<FoldedValue> values) {
    for (int i = 0; i < node.output_size() && i < static_cast<int>(values.size()); ++i) {
      const std::string& out = node.output(i);
      if (values[i].FullyKnown()) {
        folded_tensors_.push_back(values[i].ToTensor(out));
        constants_[out] = &folded_tensors_.back();
        constant_nodes_.insert(out);
      }
      folded_[out] = std::move(values[i]);
    }
  }
  // A folded value with unknown entries (the batch), nullopt when the value
  // is not folded.
  std::optional<FoldedValue> Folded(const std::string& value) const {
    auto it = folded_.find(value);
    if (it == folded_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::string source_;
  GraphDef def_;
  absl::flat_hash_set<std::string> names_;
  absl::flat_hash_map<std::string, std::string> refs_;  // ONNX value -> Nereid "node[:port]"
  absl::flat_hash_map<std::string, const onnx::TensorProto*> constants_;
  absl::flat_hash_set<std::string> constant_nodes_;  // outputs of Constant nodes
  absl::flat_hash_set<std::string> used_;
  absl::flat_hash_map<std::string, std::vector<int64_t>> dims_;
  absl::flat_hash_map<std::string, int32_t> types_;  // ONNX element types
  absl::flat_hash_map<std::string, FoldedValue> folded_;
  std::deque<onnx::TensorProto> folded_tensors_;  // what constants_ points at for folded values
};

namespace {

absl::StatusOr<DataType> FromOnnxType(int32_t type) {
  switch (type) {
    case onnx::TensorProto::FLOAT: return DT_FLOAT;
    case onnx::TensorProto::DOUBLE: return DT_DOUBLE;
    case onnx::TensorProto::INT32: return DT_INT32;
    case onnx::TensorProto::INT64: return DT_INT64;
    case onnx::TensorProto::BOOL: return DT_BOOL;
    case onnx::TensorProto::UINT8: return DT_UINT8;
    default:
      return absl::UnimplementedError(
          absl::StrCat("element type ", onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(type)),
                       " is not supported (float, double, int32, int64, bool, uint8 are)"));
  }
}

// Values of an integer or float constant, whatever its stored type.
template <typename T>
std::optional<std::vector<T>> ConstantValues(const onnx::TensorProto* tensor) {
  if (tensor == nullptr) return std::nullopt;
  if (tensor->data_type() == onnx::TensorProto::BOOL) {  // a mask: one byte (or int32) per element
    int64_t n = 1;
    for (int64_t d : tensor->dims()) n *= d;
    if (n < 0 || n > (int64_t{1} << 26)) return std::nullopt;
    std::vector<T> out(n);
    const std::string& raw = tensor->raw_data();
    if (static_cast<int64_t>(raw.size()) == n) {
      for (int64_t i = 0; i < n; ++i) out[i] = raw[i] != 0 ? T{1} : T{0};
    } else if (tensor->int32_data_size() == n) {
      for (int64_t i = 0; i < n; ++i) out[i] = tensor->int32_data(i) != 0 ? T{1} : T{0};
    } else {
      return std::nullopt;
    }
    return out;
  }
  absl::StatusOr<TensorProto> t = FromOnnxTensor(*tensor);
  if (!t.ok()) return std::nullopt;
  int64_t n = 1;
  for (int64_t d : t->shape().dim()) n *= d;
  std::vector<T> out(n);
  const std::string& raw = t->raw_data();
  for (int64_t i = 0; i < n; ++i) {
    switch (t->dtype()) {
      case DT_FLOAT: { float v; std::memcpy(&v, raw.data() + 4 * i, 4); out[i] = static_cast<T>(v); break; }
      case DT_DOUBLE: { double v; std::memcpy(&v, raw.data() + 8 * i, 8); out[i] = static_cast<T>(v); break; }
      case DT_INT32: { int32_t v; std::memcpy(&v, raw.data() + 4 * i, 4); out[i] = static_cast<T>(v); break; }
      case DT_INT64: { int64_t v; std::memcpy(&v, raw.data() + 8 * i, 8); out[i] = static_cast<T>(v); break; }
      default: return std::nullopt;
    }
  }
  return out;
}

std::string NodeLabel(const onnx::NodeProto& node) {
  std::string name = node.name().empty() ? (node.output_size() > 0 ? node.output(0) : std::string("?")) : node.name();
  return absl::StrCat("ONNX node '", name, "' (", node.op_type(), ")");
}

}  // namespace

// --- OnnxNodeContext -------------------------------------------------------

absl::StatusOr<std::string> OnnxNodeContext::Input(int i) {
  if (!HasInput(i)) return Malformed(absl::StrCat("input ", i, " is missing"));
  return builder_.Resolve(node_.input(i), /*trainable=*/true);
}

absl::StatusOr<std::string> OnnxNodeContext::StateInput(int i) {
  if (!HasInput(i)) return Malformed(absl::StrCat("input ", i, " is missing"));
  return builder_.Resolve(node_.input(i), /*trainable=*/false);
}

std::optional<std::vector<int64_t>> OnnxNodeContext::InputDims(int i) const {
  if (!HasInput(i)) return std::nullopt;
  return builder_.Dims(node_.input(i));
}

std::optional<std::vector<int64_t>> OnnxNodeContext::OutputDims(int i) const {
  if (i >= node_.output_size()) return std::nullopt;
  return builder_.Dims(node_.output(i));
}

std::optional<int32_t> OnnxNodeContext::InputElemType(int i) const {
  if (!HasInput(i)) return std::nullopt;
  return builder_.ElemType(node_.input(i));
}

std::optional<std::vector<int64_t>> OnnxNodeContext::ConstantInts(int i) const {
  if (!HasInput(i)) return std::nullopt;
  return ConstantValues<int64_t>(builder_.Constant(node_.input(i)));
}

std::optional<std::vector<std::optional<int64_t>>> OnnxNodeContext::PartialInts(int i) const {
  if (!HasInput(i)) return std::nullopt;
  std::optional<FoldedValue> v = builder_.Folded(node_.input(i));
  if (!v) {
    std::optional<std::vector<int64_t>> known = ConstantInts(i);
    if (!known) return std::nullopt;
    return std::vector<std::optional<int64_t>>(known->begin(), known->end());
  }
  std::vector<std::optional<int64_t>> out;
  for (double d : v->values) {
    out.push_back(!std::isfinite(d) ? std::nullopt : std::optional<int64_t>(static_cast<int64_t>(d)));
  }
  return out;
}

std::optional<float> OnnxNodeContext::UniformInput(int i) const {
  if (!HasInput(i)) return std::nullopt;
  std::optional<FoldedValue> v = builder_.Known(node_.input(i));
  if (!v) return std::nullopt;
  if (v->uniform) return static_cast<float>(*v->uniform);
  if (!v->FullyKnown() || v->values.empty()) return std::nullopt;
  for (double x : v->values) {
    if (x != v->values[0]) return std::nullopt;
  }
  return static_cast<float>(v->values[0]);
}

std::optional<std::vector<float>> OnnxNodeContext::ConstantFloats(int i) const {
  if (!HasInput(i)) return std::nullopt;
  return ConstantValues<float>(builder_.Constant(node_.input(i)));
}

bool OnnxNodeContext::OutputUsed(int i) const {
  return i < node_.output_size() && !node_.output(i).empty() && builder_.Used(node_.output(i));
}

const onnx::AttributeProto* OnnxNodeContext::Attr(const std::string& name) const {
  for (const onnx::AttributeProto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

bool OnnxNodeContext::HasAttr(const std::string& name) const { return Attr(name) != nullptr; }

int64_t OnnxNodeContext::IntAttr(const std::string& name, int64_t fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : a->i();
}

float OnnxNodeContext::FloatAttr(const std::string& name, float fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : a->f();
}

std::string OnnxNodeContext::StringAttr(const std::string& name, const std::string& fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : a->s();
}

std::vector<int64_t> OnnxNodeContext::IntsAttr(const std::string& name) const {
  const onnx::AttributeProto* a = Attr(name);
  if (a == nullptr) return {};
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string OnnxNodeContext::AddNode(const std::string& op, const std::vector<std::string>& inputs,
                                     const google::protobuf::Map<std::string, AttrValue>& attrs,
                                     const std::string& suffix) {
  std::string base = node_.name().empty() ? (node_.output_size() > 0 ? node_.output(0) : node_.op_type())
                                          : node_.name();
  NodeDef* node = builder_.AddNode(suffix.empty() ? base : absl::StrCat(base, "/", suffix), op);
  for (const std::string& in : inputs) node->add_input(in);
  *node->mutable_attr() = attrs;
  return node->name();
}

std::string OnnxNodeContext::AddScalar(float value, const std::string& suffix) {
  return AddFloatConstant({value}, {}, suffix);
}

std::string OnnxNodeContext::AddFloatConstant(const std::vector<float>& values, const std::vector<int64_t>& dims,
                                              const std::string& suffix) {
  google::protobuf::Map<std::string, AttrValue> attrs;
  TensorProto* t = attrs["value"].mutable_tensor();
  t->set_dtype(DT_FLOAT);
  for (float v : values) t->add_float_val(v);
  TensorShapeProto* shape = t->mutable_shape();  // no dims: a scalar
  for (int64_t d : dims) shape->add_dim(d);
  return AddNode("Const", {}, attrs, suffix);
}

void OnnxNodeContext::SetOutput(int i, const std::string& nereid_ref) {
  if (i < node_.output_size() && !node_.output(i).empty()) builder_.SetRef(node_.output(i), nereid_ref);
}

absl::Status OnnxNodeContext::Unsupported(const std::string& what) const {
  return absl::UnimplementedError(absl::StrCat(builder_.source(), ": ", NodeLabel(node_), ": ", what));
}

absl::Status OnnxNodeContext::Malformed(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(builder_.source(), ": ", NodeLabel(node_), ": ", what));
}

AttrValue IntAttrValue(int64_t v) { AttrValue a; a.set_i(v); return a; }
AttrValue FloatAttrValue(float v) { AttrValue a; a.set_f(v); return a; }
AttrValue StringAttrValue(const std::string& v) { AttrValue a; a.set_s(v); return a; }
AttrValue BoolAttrValue(bool v) { AttrValue a; a.set_b(v); return a; }
AttrValue IntsAttrValue(const std::vector<int64_t>& v) {
  AttrValue a;
  for (int64_t x : v) a.mutable_list()->add_i(x);
  return a;
}

// --- Registry --------------------------------------------------------------

OnnxConverterRegistry& OnnxConverterRegistry::Global() {
  static auto* registry = new OnnxConverterRegistry;
  return *registry;
}

absl::Status OnnxConverterRegistry::Register(std::string op_type, const std::string& attributes,
                                             OnnxConverterFn convert) {
  if (converters_.contains(op_type)) return absl::AlreadyExistsError(absl::StrCat("ONNX op ", op_type, " registered twice"));
  OnnxConverter converter{op_type, {}, std::move(convert)};
  for (absl::string_view a : absl::StrSplit(attributes, ' ', absl::SkipEmpty())) converter.attributes.emplace(a);
  converters_.emplace(op_type, std::move(converter));
  return absl::OkStatus();
}

const OnnxConverter* OnnxConverterRegistry::Find(const std::string& op_type) const {
  auto it = converters_.find(op_type);
  return it == converters_.end() ? nullptr : &it->second;
}

std::vector<std::string> OnnxConverterRegistry::OpTypes() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : converters_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

// --- Tensors ---------------------------------------------------------------

absl::StatusOr<TensorProto> FromOnnxTensor(const onnx::TensorProto& tensor) {
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError("external data is not supported; save the model with its weights inside");
  }
  absl::StatusOr<DataType> dtype = FromOnnxType(tensor.data_type());
  if (!dtype.ok()) return dtype.status();
  TensorProto out;
  out.set_dtype(*dtype);
  std::vector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  absl::StatusOr<int64_t> count = CheckedElementCount(dims);  // refuses negative dims and overflow
  if (!count.ok()) return count.status();
  const int64_t n = *count;
  for (int64_t d : dims) out.mutable_shape()->add_dim(d);
  const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(DataTypeSize(*dtype));
  std::string raw;
  if (tensor.has_raw_data()) {
    raw = tensor.raw_data();
  } else {
    auto copy = [&](const auto& values, auto as) -> absl::Status {
      // Checked before allocating: the dims alone may claim any size.
      if (static_cast<int64_t>(values.size()) != n) {
        return absl::InvalidArgumentError(absl::StrCat("holds ", values.size(), " values for ", n, " elements"));
      }
      raw.resize(bytes);
      char* dst = raw.data();
      using T = decltype(as);
      for (int64_t i = 0; i < n; ++i) {
        T v = static_cast<T>(values[i]);
        std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
      }
      return absl::OkStatus();
    };
    absl::Status status;
    switch (*dtype) {
      case DT_FLOAT: status = copy(tensor.float_data(), float{}); break;
      case DT_DOUBLE: status = copy(tensor.double_data(), double{}); break;
      case DT_INT64: status = copy(tensor.int64_data(), int64_t{}); break;
      case DT_INT32: status = copy(tensor.int32_data(), int32_t{}); break;
      case DT_BOOL:
      case DT_UINT8: status = copy(tensor.int32_data(), uint8_t{}); break;
      default: status = absl::UnimplementedError("unsupported element type");
    }
    if (!status.ok()) return status;
  }
  if (raw.size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("holds ", raw.size(), " bytes for ", n, " elements of ",
                                                   static_cast<size_t>(DataTypeSize(*dtype)), " bytes"));
  }
  out.set_raw_data(std::move(raw));
  return out;
}

std::string OnnxNameToNodeName(const std::string& onnx_name) {
  std::string name = onnx_name;
  for (char& ch : name) {
    if (ch == ':' || ch == ' ') ch = '_';
  }
  while (!name.empty() && (name[0] == '^' || name[0] == '/')) name.erase(0, 1);
  return name.empty() ? "node" : name;
}

bool IsOnnxPath(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

// --- The import ------------------------------------------------------------

namespace {

absl::StatusOr<int64_t> DefaultOpset(const onnx::ModelProto& model, const std::string& source) {
  for (const onnx::OperatorSetIdProto& id : model.opset_import()) {
    if (id.domain().empty() || id.domain() == "ai.onnx") return id.version();
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": the model imports no version of the default ONNX opset"));
}

// Adds an Input for ONNX graph input `v`; `batch` replaces dimension 0 by -1.
absl::StatusOr<std::string> AddGraphInput(OnnxGraphBuilder& b, const onnx::ValueInfoProto& v, bool batch,
                                          const std::string& feed) {
  const std::string where = absl::StrCat(b.source(), ": graph input '", v.name(), "'");
  if (!v.type().has_tensor_type()) return absl::UnimplementedError(absl::StrCat(where, " is not a tensor"));
  absl::StatusOr<DataType> dtype = FromOnnxType(v.type().tensor_type().elem_type());
  if (!dtype.ok()) return absl::Status(dtype.status().code(), absl::StrCat(where, ": ", dtype.status().message()));
  if (!v.type().tensor_type().has_shape()) {
    return absl::UnimplementedError(absl::StrCat(where, " has no declared shape; Nereid needs the rank and every dimension but the batch"));
  }
  NodeDef* node = b.AddNode(v.name(), "Input");
  TensorShapeProto* shape = (*node->mutable_attr())["shape"].mutable_shape();
  const auto& dims = v.type().tensor_type().shape().dim();
  for (int i = 0; i < dims.size(); ++i) {
    if (batch && i == 0) {
      shape->add_dim(-1);
    } else if (dims[i].has_dim_value()) {
      shape->add_dim(dims[i].dim_value());
    } else {
      return absl::UnimplementedError(absl::StrCat(where, ": dimension ", i, " ('", dims[i].dim_param(),
                                                   "') is not fixed; only the batch dimension may vary"));
    }
  }
  if (*dtype != DT_FLOAT) (*node->mutable_attr())["dtype"].set_type(*dtype);
  if (!feed.empty()) (*node->mutable_attr())["feed"].set_s(feed);
  b.SetRef(v.name(), node->name());
  return node->name();
}

absl::Status ConvertNode(OnnxGraphBuilder& b, const onnx::NodeProto& node, int64_t opset) {
  OnnxNodeContext context(b, node, opset);
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return context.Unsupported(absl::StrCat("domain '", node.domain(), "' is not supported"));
  }
  const OnnxConverter* converter = OnnxConverterRegistry::Global().Find(node.op_type());
  if (converter == nullptr) return context.Unsupported("op not supported");
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (converter->attributes.count(a.name()) == 0) {
      return context.Unsupported(absl::StrCat("attribute '", a.name(), "' is not supported"));
    }
  }
  return converter->convert(context);
}

// Folds or converts every node. A node that cannot be expressed (an op with
// no converter, or one the converter refuses) does not stop the import: its
// outputs are marked and the nodes that depend on them skipped, so that one
// error names every node the model needs and every op missing, with counts.
absl::Status ConvertNodes(OnnxGraphBuilder& b, const onnx::GraphProto& graph, int64_t opset) {
  absl::flat_hash_set<std::string> lost;  // outputs of nodes that could not be imported
  std::vector<std::string> refusals;
  std::map<std::string, int> missing_ops;
  for (const onnx::NodeProto& node : graph.node()) {
    bool depends_on_lost = false;
    for (const std::string& in : node.input()) depends_on_lost |= lost.contains(in);
    if (depends_on_lost) {  // not converted, but an op it lacks is still named
      for (const std::string& out : node.output()) lost.insert(out);
      if (OnnxConverterRegistry::Global().Find(node.op_type()) == nullptr) {
        ++missing_ops[node.op_type()];
        refusals.push_back(std::string(OnnxNodeContext(b, node, opset).Unsupported("op not supported").message()));
      }
      continue;
    }
    absl::StatusOr<std::optional<std::vector<FoldedValue>>> folded = TryFold(node, b.Folding());
    if (!folded.ok()) return absl::InvalidArgumentError(absl::StrCat(b.source(), ": ", folded.status().message()));
    if (folded->has_value()) {
      b.RecordFolded(node, **std::move(folded));
      continue;
    }
    absl::Status status = ConvertNode(b, node, opset);
    if (status.ok()) continue;
    if (!absl::IsUnimplemented(status)) return status;
    for (const std::string& out : node.output()) lost.insert(out);
    if (OnnxConverterRegistry::Global().Find(node.op_type()) == nullptr) ++missing_ops[node.op_type()];
    refusals.push_back(std::string(status.message()));
  }
  if (refusals.empty()) return absl::OkStatus();
  std::vector<std::string> ops;
  for (const auto& [op, count] : missing_ops) ops.push_back(absl::StrCat(op, " (", count, count == 1 ? " node)" : " nodes)"));
  constexpr size_t kListed = 20;
  std::string listed = absl::StrJoin(refusals.begin(), refusals.begin() + std::min(refusals.size(), kListed), "\n  ");
  if (refusals.size() > kListed) absl::StrAppend(&listed, "\n  ... and ", refusals.size() - kListed, " more");
  return absl::UnimplementedError(absl::StrCat(
      b.source(), ": ", refusals.size(), refusals.size() == 1 ? " ONNX node" : " ONNX nodes",
      " cannot be imported", ops.empty() ? "" : absl::StrCat("; ops with no converter: ", absl::StrJoin(ops, ", ")),
      "\n  ", listed, ops.empty() ? "" : absl::StrCat("\n(supported: ", absl::StrJoin(OnnxConverterRegistry::Global().OpTypes(), ", "), ")")));
}

// A folded Reshape target with unknown entries as a static one: the batch
// entry (+inf) becomes -1; an explicit -1 beside it is computed from the
// input's dims, whose one batch dimension cancels the target's. Nullopt when
// that cannot be done exactly (two unknowns, an unknown that is not the batch,
// sizes that do not divide).
struct StaticTarget {
  FoldedValue shape;  // -1 at the batch
  int batch;          // its position
};

std::optional<StaticTarget> StaticReshapeTarget(const FoldedValue& shape, std::optional<std::vector<int64_t>> in) {
  FoldedValue target = shape;
  int batch = -1, minus_one = -1, unknown = 0;
  int64_t known = 1;
  for (size_t i = 0; i < target.values.size(); ++i) {
    double& v = target.values[i];
    if (v == 0 && in && i < in->size()) v = (*in)[i] == kBatchDim ? std::numeric_limits<double>::infinity()
                                          : (*in)[i] >= 0      ? static_cast<double>((*in)[i])
                                                               : v;
    if (std::isinf(v) && v > 0) {
      batch = static_cast<int>(i);
    } else if (std::isnan(v) || v == 0) {
      ++unknown;
    } else if (v == -1) {
      minus_one = static_cast<int>(i);
    } else {
      known *= static_cast<int64_t>(v);
    }
  }
  if (batch < 0 || unknown > 0 || std::count_if(target.values.begin(), target.values.end(),
                                                 [](double v) { return std::isinf(v); }) != 1) {
    return std::nullopt;
  }
  if (minus_one >= 0) {
    if (!in) return std::nullopt;
    int64_t in_known = 1;
    int in_batch = 0;
    for (int64_t d : *in) {
      if (d == kBatchDim) {
        ++in_batch;
      } else if (d < 0) {
        return std::nullopt;
      } else {
        in_known *= d;
      }
    }
    if (in_batch != 1 || known == 0 || in_known % known != 0) return std::nullopt;
    target.values[minus_one] = static_cast<double>(in_known / known);
  }
  target.values[batch] = -1;
  return StaticTarget{std::move(target), batch};
}

// Gives the Reshape output `value` the dims of `target`, the batch's symbol
// at its position, so shape inference carries the batch on.
void MarkBatch(onnx::GraphProto& graph, const std::string& value, const StaticTarget& target,
               std::optional<int32_t> elem_type) {
  if (!elem_type) return;
  onnx::ValueInfoProto* info = nullptr;
  for (onnx::ValueInfoProto& v : *graph.mutable_value_info()) {
    if (v.name() == value) info = &v;
  }
  if (info == nullptr) info = graph.add_value_info();
  info->set_name(value);
  onnx::TypeProto::Tensor* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(*elem_type);
  onnx::TensorShapeProto* dims = tensor->mutable_shape();
  dims->clear_dim();
  for (size_t i = 0; i < target.shape.values.size(); ++i) {
    onnx::TensorShapeProto::Dimension* d = dims->add_dim();
    if (static_cast<int>(i) == target.batch) {
      d->set_dim_param(kBatchSymbol);
    } else {
      d->set_dim_value(static_cast<int64_t>(target.shape.values[i]));
    }
  }
}

absl::Status InferShapes(onnx::ModelProto& model, const std::string& source) {
  RETURN_IF_ERROR(CheckAttributesBeforeInference(model, source));
  try {
    // Node-level inference errors are not fatal (error_mode 0): a value
    // whose shape stays unknown makes the converters that need it refuse.
    // Data propagation carries shape values through Shape -> Gather ->
    // Concat, so a Reshape to a computed shape gets static dims.
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, /*enable_data_propagation=*/true));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ONNX shape inference failed: ", e.what()));
  }
  return absl::OkStatus();
}

// Replaces every node whose outputs all fold to known values by Constant
// nodes holding them, and infers shapes again: a Slice whose bounds were
// computed then gets static dims, so the Shape read after it folds too. Each
// round reaches one block further into a network that computes its shapes
// block by block (ShuffleNet's channel shuffles), so rounds repeat until
// nothing changes, at most kMaxFoldingRounds.
constexpr int kMaxFoldingRounds = 256;

absl::Status FoldConstantNodes(onnx::ModelProto& model, const std::string& source) {
  for (int round = 0; round < kMaxFoldingRounds; ++round) {
    onnx::GraphProto* graph = model.mutable_graph();
    OnnxGraphBuilder b(*graph, source);
    int replaced = 0;
    std::vector<onnx::NodeProto> targets;  // Reshape targets made static, placed first
    for (onnx::NodeProto& node : *graph->mutable_node()) {
      absl::StatusOr<std::optional<std::vector<FoldedValue>>> folded = TryFold(node, b.Folding());
      if (!folded.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", folded.status().message()));
      if (!folded->has_value()) {
        // A Reshape to a folded shape whose one unknown entry is the batch
        // (x.view(x.size(0), ...) through a Cast or a Div that shape
        // inference does not follow) gets that shape with -1 there, so the
        // dims after it are known again; the batch keeps its symbol.
        std::optional<FoldedValue> shape =
            node.op_type() == "Reshape" && node.input_size() == 2 ? b.Folded(node.input(1)) : std::nullopt;
        if (!shape || shape->FullyKnown() || shape->values.size() != static_cast<size_t>(shape->num_elements())) continue;
        std::optional<StaticTarget> target = StaticReshapeTarget(*shape, b.Dims(node.input(0)));
        if (!target) continue;
        const std::string name = absl::StrCat(node.input(1), "/nereid_static");
        onnx::NodeProto constant;
        constant.set_name(name);
        constant.set_op_type("Constant");
        constant.add_output(name);
        onnx::AttributeProto* value = constant.add_attribute();
        value->set_name("value");
        value->set_type(onnx::AttributeProto::TENSOR);
        *value->mutable_t() = target->shape.ToTensor(name);
        MarkBatch(*graph, node.output(0), *target, b.ElemType(node.input(0)));
        targets.push_back(std::move(constant));
        node.set_input(1, name);
        ++replaced;
        continue;
      }
      std::vector<FoldedValue> values = **folded;
      b.RecordFolded(node, values);
      if (node.op_type() == "Constant" || node.output_size() != 1 || !values[0].FullyKnown()) continue;
      onnx::NodeProto constant;
      constant.set_name(node.name());
      constant.set_op_type("Constant");
      constant.add_output(node.output(0));
      onnx::AttributeProto* value = constant.add_attribute();
      value->set_name("value");
      value->set_type(onnx::AttributeProto::TENSOR);
      *value->mutable_t() = values[0].ToTensor(node.output(0));
      node = std::move(constant);
      ++replaced;
    }
    if (replaced == 0) return absl::OkStatus();
    if (!targets.empty()) {
      google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
      for (onnx::NodeProto& t : targets) *nodes.Add() = std::move(t);
      for (onnx::NodeProto& n : *graph->mutable_node()) *nodes.Add() = std::move(n);
      graph->mutable_node()->Swap(&nodes);
    }
    RETURN_IF_ERROR(InferShapes(model, source));
  }
  return absl::OkStatus();
}

void SetGraphAttr(GraphDef& def, const std::string& key, const std::string& value) {
  (*def.mutable_attr())[key].set_s(value);
}

}  // namespace

absl::StatusOr<GraphDef> ImportOnnxModel(const onnx::ModelProto& original, const OnnxImportOptions& options,
                                         const std::string& source) {
  absl::StatusOr<int64_t> opset = DefaultOpset(original, source);
  if (!opset.ok()) return opset.status();
  onnx::ModelProto model = original;
  if (!options.forward_only) {
    // The batch varies in training: a size the exporter fixed must not leak
    // into shapes (Reshape's copied dims, Flatten's products).
    std::vector<std::string> initializer_names;
    for (const onnx::TensorProto& t : model.graph().initializer()) initializer_names.push_back(t.name());
    for (onnx::ValueInfoProto& v : *model.mutable_graph()->mutable_input()) {
      if (std::find(initializer_names.begin(), initializer_names.end(), v.name()) != initializer_names.end()) continue;
      auto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
      if (shape->dim_size() > 0) shape->mutable_dim(0)->set_dim_param(kBatchSymbol);
    }
  }
  RETURN_IF_ERROR(InferShapes(model, source));
  RETURN_IF_ERROR(FoldConstantNodes(model, source));
  const onnx::GraphProto& graph = model.graph();
  OnnxGraphBuilder b(graph, source);
  GraphDef& def = b.def();
  def.set_version(kGraphFormatVersion);

  absl::flat_hash_set<std::string> initializers;
  for (const onnx::TensorProto& t : graph.initializer()) initializers.insert(t.name());
  std::vector<const onnx::ValueInfoProto*> fed;
  for (const onnx::ValueInfoProto& v : graph.input()) {
    if (!initializers.contains(v.name())) fed.push_back(&v);
  }
  if (!options.forward_only && fed.size() != 1) {
    std::vector<std::string> names;
    for (const auto* v : fed) names.push_back(v->name());
    return absl::UnimplementedError(absl::StrCat(source, ": the model has ", fed.size(), " data inputs (",
                                                 absl::StrJoin(names, ", "),
                                                 "); a training graph takes one, which the dataset's images feed"));
  }
  for (const onnx::ValueInfoProto* v : fed) {
    absl::StatusOr<std::string> input =
        AddGraphInput(b, *v, /*batch=*/!options.forward_only, options.forward_only ? "" : "images");
    if (!input.ok()) return input.status();
  }
  RETURN_IF_ERROR(ConvertNodes(b, graph, *opset));

  if (options.forward_only) {
    for (const onnx::ValueInfoProto& v : graph.output()) {
      absl::StatusOr<std::string> ref = b.Resolve(v.name(), true);
      if (!ref.ok()) return ref.status();
      NodeDef* out = b.AddNode(v.name(), "Identity");
      out->add_input(*ref);
    }
    return def;
  }
  if (graph.output_size() != 1) {
    return absl::UnimplementedError(absl::StrCat(source, ": the model has ", graph.output_size(),
                                                 " outputs; a training graph has one, the logits the loss reads"));
  }
  const std::string& output = graph.output(0).name();
  absl::StatusOr<std::string> ref = b.Resolve(output, true);
  if (!ref.ok()) return ref.status();
  NodeDef* logits = b.AddNode("logits", "Identity");
  logits->add_input(*ref);
  // One label per row of class scores: [B] for [B, K] logits, [B, T] for a
  // sequence's [B, T, K].
  std::optional<std::vector<int64_t>> out_dims = b.Dims(output);
  NodeDef* labels = b.AddNode("labels", "Input");
  (*labels->mutable_attr())["shape"].mutable_shape()->add_dim(-1);
  if (out_dims && out_dims->size() > 2) {
    for (size_t i = 1; i + 1 < out_dims->size(); ++i) {
      (*labels->mutable_attr())["shape"].mutable_shape()->add_dim((*out_dims)[i]);
    }
  }
  (*labels->mutable_attr())["dtype"].set_type(DT_INT32);
  (*labels->mutable_attr())["feed"].set_s("labels");
  NodeDef* loss = b.AddNode("loss", options.loss);
  loss->add_input(logits->name());
  loss->add_input(labels->name());
  SetGraphAttr(def, "loss", loss->name());
  SetGraphAttr(def, "logits", logits->name());
  if (!options.dataset.empty()) SetGraphAttr(def, "dataset", options.dataset);
  if (out_dims && out_dims->size() >= 2 && out_dims->back() > 0) {
    (*def.mutable_attr())["num_classes"].set_i(out_dims->back());
  }
  return def;
}

absl::StatusOr<GraphDef> ImportOnnxFile(const std::string& path, const OnnxImportOptions& options) {
  absl::StatusOr<std::string> bytes = ReadGraphFileContents(path);
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto model;
  if (!model.ParseFromString(*bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an ONNX model (the file does not parse as ModelProto)"));
  }
  return ImportOnnxModel(model, options, path);
}

}  // namespace nereid
