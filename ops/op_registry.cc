#include "ops/op_registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"

namespace nereid {

std::string AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kString: return "string";
    case AttrType::kBool: return "bool";
    case AttrType::kType: return "type";
    case AttrType::kShape: return "shape";
    case AttrType::kTensor: return "tensor";
    case AttrType::kIntList: return "list(int)";
    case AttrType::kFloatList: return "list(float)";
    case AttrType::kStringList: return "list(string)";
  }
  return "?";
}

namespace {

bool ListIsEmpty(const AttrValue::ListValue& l) {
  return l.i_size() == 0 && l.f_size() == 0 && l.s_size() == 0 && l.b_size() == 0 &&
         l.type_size() == 0 && l.shape_size() == 0 && l.tensor_size() == 0;
}

}  // namespace

bool AttrValueHasType(const AttrValue& value, AttrType type) {
  switch (type) {
    case AttrType::kInt: return value.value_case() == AttrValue::kI;
    case AttrType::kFloat:
      // An integer literal is accepted where a float is expected.
      return value.value_case() == AttrValue::kF || value.value_case() == AttrValue::kI;
    case AttrType::kString: return value.value_case() == AttrValue::kS;
    case AttrType::kBool: return value.value_case() == AttrValue::kB;
    case AttrType::kType: return value.value_case() == AttrValue::kType;
    case AttrType::kShape: return value.value_case() == AttrValue::kShape;
    case AttrType::kTensor: return value.value_case() == AttrValue::kTensor;
    case AttrType::kIntList:
    case AttrType::kFloatList:
    case AttrType::kStringList: {
      if (value.value_case() != AttrValue::kList) return false;
      const auto& l = value.list();
      if (ListIsEmpty(l)) return true;
      if (type == AttrType::kIntList) return l.i_size() > 0 && l.f_size() == 0 && l.s_size() == 0;
      if (type == AttrType::kFloatList) return (l.f_size() > 0 || l.i_size() > 0) && l.s_size() == 0;
      return l.s_size() > 0 && l.i_size() == 0 && l.f_size() == 0;
    }
  }
  return false;
}

std::string DescribeAttrValueType(const AttrValue& value) {
  switch (value.value_case()) {
    case AttrValue::kI: return "int";
    case AttrValue::kF: return "float";
    case AttrValue::kS: return "string";
    case AttrValue::kB: return "bool";
    case AttrValue::kType: return "type";
    case AttrValue::kShape: return "shape";
    case AttrValue::kTensor: return "tensor";
    case AttrValue::kList: {
      const auto& l = value.list();
      if (l.i_size() > 0) return "list(int)";
      if (l.f_size() > 0) return "list(float)";
      if (l.s_size() > 0) return "list(string)";
      if (l.b_size() > 0) return "list(bool)";
      if (l.type_size() > 0) return "list(type)";
      if (l.shape_size() > 0) return "list(shape)";
      if (l.tensor_size() > 0) return "list(tensor)";
      return "list()";
    }
    case AttrValue::VALUE_NOT_SET: return "nothing (an empty value)";
  }
  return "?";
}

const AttrValue& InferenceContext::GetAttr(absl::string_view name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) {
    // Validation fills every declared attribute; reaching here is a bug in an
    // op's shape function (it asked for an attribute it did not declare).
    Log().critical("op {} asked for undeclared attribute '{}'", node_->op(), std::string(name));
    std::abort();
  }
  return *it->second;
}

int64_t InferenceContext::GetInt(absl::string_view name) const { return GetAttr(name).i(); }
float InferenceContext::GetFloat(absl::string_view name) const {
  const AttrValue& v = GetAttr(name);
  return v.value_case() == AttrValue::kI ? static_cast<float>(v.i()) : v.f();
}
const std::string& InferenceContext::GetString(absl::string_view name) const { return GetAttr(name).s(); }
bool InferenceContext::GetBool(absl::string_view name) const { return GetAttr(name).b(); }
DataType InferenceContext::GetType(absl::string_view name) const { return GetAttr(name).type(); }
const TensorShapeProto& InferenceContext::GetShape(absl::string_view name) const {
  return GetAttr(name).shape();
}
const TensorProto& InferenceContext::GetTensor(absl::string_view name) const {
  return GetAttr(name).tensor();
}
std::vector<int64_t> InferenceContext::GetIntList(absl::string_view name) const {
  const auto& l = GetAttr(name).list();
  return std::vector<int64_t>(l.i().begin(), l.i().end());
}

const AttrSpec* OpDef::FindAttr(absl::string_view attr_name) const {
  for (const AttrSpec& a : attrs) {
    if (a.name == attr_name) return &a;
  }
  return nullptr;
}

const ArgSpec& OpDef::InputArg(int port) const {
  return inputs[std::min<int>(port, static_cast<int>(inputs.size()) - 1)];
}

std::string OpDef::InputName(int port) const {
  if (inputs.empty()) return absl::StrCat(port);
  int index = std::min<int>(port, static_cast<int>(inputs.size()) - 1);
  const ArgSpec& arg = inputs[index];
  return arg.variadic ? absl::StrCat(arg.name, "[", port - index, "]") : arg.name;
}

int OpDef::MinInputs() const {
  int n = 0;
  for (const ArgSpec& a : inputs) n += a.variadic ? a.min_count : 1;
  return n;
}

int OpDef::MaxInputs() const {
  for (const ArgSpec& a : inputs) {
    if (a.variadic) return -1;
  }
  return static_cast<int>(inputs.size());
}

std::string OpDef::InputSignature() const {
  return absl::StrCat("(", absl::StrJoin(inputs, ", ", [](std::string* out, const ArgSpec& a) {
                        absl::StrAppend(out, a.name, a.variadic ? "..." : "");
                      }),
                      ")");
}

OpDefBuilder::OpDefBuilder(std::string name) { def_.name = std::move(name); }

OpDefBuilder& OpDefBuilder::Summary(std::string text) {
  def_.summary = std::move(text);
  return *this;
}

OpDefBuilder& OpDefBuilder::Input(std::string name, std::vector<DataType> allowed_types) {
  def_.inputs.push_back({std::move(name), std::move(allowed_types), false, 1});
  return *this;
}

OpDefBuilder& OpDefBuilder::InputList(std::string name, int min_count,
                                      std::vector<DataType> allowed_types) {
  def_.inputs.push_back({std::move(name), std::move(allowed_types), true, min_count});
  return *this;
}

OpDefBuilder& OpDefBuilder::Output(std::string name) {
  def_.outputs.push_back(std::move(name));
  return *this;
}

OpDefBuilder& OpDefBuilder::OutputList(std::string name) {
  def_.outputs.push_back(std::move(name));
  def_.output_per_input = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::Attr(std::string name, AttrType type, AttrValue default_value,
                                 std::string doc) {
  def_.attrs.push_back({std::move(name), type, std::move(default_value), {}, std::move(doc)});
  return *this;
}

OpDefBuilder& OpDefBuilder::RequiredAttr(std::string name, AttrType type, std::string doc) {
  def_.attrs.push_back({std::move(name), type, std::nullopt, {}, std::move(doc)});
  return *this;
}

OpDefBuilder& OpDefBuilder::EnumAttr(std::string name, std::vector<std::string> allowed,
                                     std::string default_value, std::string doc) {
  def_.attrs.push_back({std::move(name), AttrType::kString, StringAttr(std::move(default_value)),
                        std::move(allowed), std::move(doc)});
  return *this;
}

OpDefBuilder& OpDefBuilder::Collective() {
  def_.collective = true;
  def_.communicates = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::Communicates() {
  def_.communicates = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::Elementwise() {
  def_.elementwise = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::ClosesCycles() {
  def_.closes_cycles = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::SetShapeFn(ShapeFn fn) {
  def_.shape_fn = std::move(fn);
  return *this;
}

OpDefBuilder& OpDefBuilder::SetGradient(GradFn fn) {
  def_.grad_fn = std::move(fn);
  return *this;
}

OpDefBuilder& OpDefBuilder::UpdatesState(int input, int output) {
  def_.state_updates.emplace_back(input, output);
  return *this;
}

OpDefBuilder& OpDefBuilder::NoGradient(std::string reason) {
  def_.no_gradient = std::move(reason);
  return *this;
}

OpDefBuilder& OpDefBuilder::SetCostFn(CostFn fn) {
  def_.cost_fn = std::move(fn);
  return *this;
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry* registry = new OpRegistry();
  return *registry;
}

absl::Status OpRegistry::Register(OpDef def) {
  if (def.name.empty()) return absl::InvalidArgumentError("an op was registered without a name");
  if (ops_.contains(def.name)) {
    return absl::AlreadyExistsError(absl::StrCat("op '", def.name, "' is registered twice"));
  }
  if (!def.shape_fn) {
    return absl::InvalidArgumentError(absl::StrCat("op '", def.name, "' has no shape function"));
  }
  if (def.outputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("op '", def.name, "' has no outputs"));
  }
  if (def.output_per_input && def.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("op '", def.name, "': an output list must be the only output"));
  }
  for (const AttrSpec& a : def.attrs) {
    if (a.default_value && !AttrValueHasType(*a.default_value, a.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("op '", def.name, "': default of attribute '", a.name, "' is not ",
                       AttrTypeName(a.type)));
    }
  }
  for (size_t i = 0; i + 1 < def.inputs.size(); ++i) {
    if (def.inputs[i].variadic) {
      return absl::InvalidArgumentError(absl::StrCat("op '", def.name, "': an input list must be the last input"));
    }
  }
  std::string name = def.name;
  ops_[name] = std::make_unique<OpDef>(std::move(def));
  return absl::OkStatus();
}

const OpDef* OpRegistry::Find(absl::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

std::vector<std::string> OpRegistry::OpNames() const {
  std::vector<std::string> names;
  for (const auto& [name, def] : ops_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

AttrMap AttrsWithDefaults(const Node& node, const OpDef& def) {
  AttrMap attrs;
  for (const AttrSpec& spec : def.attrs) {
    auto it = node.def().attr().find(spec.name);
    if (it != node.def().attr().end()) {
      attrs[spec.name] = &it->second;
    } else if (spec.default_value) {
      attrs[spec.name] = &*spec.default_value;
    }
  }
  return attrs;
}

AttrValue IntAttr(int64_t v) {
  AttrValue a;
  a.set_i(v);
  return a;
}
AttrValue FloatAttr(float v) {
  AttrValue a;
  a.set_f(v);
  return a;
}
AttrValue StringAttr(std::string v) {
  AttrValue a;
  a.set_s(std::move(v));
  return a;
}
AttrValue BoolAttr(bool v) {
  AttrValue a;
  a.set_b(v);
  return a;
}
AttrValue TypeAttr(DataType v) {
  AttrValue a;
  a.set_type(v);
  return a;
}
AttrValue IntListAttr(std::vector<int64_t> v) {
  AttrValue a;
  auto* list = a.mutable_list();
  for (int64_t x : v) list->add_i(x);
  return a;
}
AttrValue ShapeAttr(std::vector<int64_t> dims) {
  AttrValue a;
  for (int64_t d : dims) a.mutable_shape()->add_dim(d);
  return a;
}

}  // namespace nereid
