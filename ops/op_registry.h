#ifndef NEREID_OPS_OP_REGISTRY_H_
#define NEREID_OPS_OP_REGISTRY_H_

// One record per op: its signature (inputs, outputs, typed attributes with
// defaults), its shape/dtype function and its cost function. Gradient
// builders and kernels join this record in later issues, so the three can
// never drift apart the way separate registries do.
//
// Registering an op is one statement in the op family's file:
//
//   NEREID_REGISTER_OP(OpDefBuilder("Relu")
//       .Summary("max(x, 0), elementwise.")
//       .Input("x", kFloatTypes)
//       .Output("y")
//       .SetShapeFn(shape_fns::UnchangedShape)
//       .SetCostFn(cost_fns::OneFlopPerOutput));
//
// Op libraries are `alwayslink` so the linker cannot drop their registrations.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/registration.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"

namespace nereid {

enum class AttrType {
  kInt,
  kFloat,
  kString,
  kBool,
  kType,
  kShape,
  kTensor,
  kIntList,
  kFloatList,
  kStringList,
};

// "int", "list(int)", ...
std::string AttrTypeName(AttrType type);
// Whether `value` holds a `type`. An int also counts as a float, and an empty
// list matches every list type.
bool AttrValueHasType(const AttrValue& value, AttrType type);
// What `value` holds ("int", "list(float)", ...), for errors.
std::string DescribeAttrValueType(const AttrValue& value);

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // nullopt: required
  std::vector<std::string> allowed_strings;  // for kString; empty: any
  std::string doc;
};

struct ArgSpec {
  std::string name;
  std::vector<DataType> allowed_types;  // empty: any
  bool variadic = false;                // a list of >= min_count inputs
  int min_count = 1;
};

inline const std::vector<DataType> kFloatTypes = {DT_FLOAT, DT_DOUBLE, DT_HALF, DT_BFLOAT16};
inline const std::vector<DataType> kIndexTypes = {DT_INT32, DT_INT64};

// What a shape or cost function sees of one node: input shapes and dtypes,
// and attributes whose presence and type validation has already checked
// (defaults filled in), so the getters cannot fail.
struct OpDef;

class InferenceContext {
 public:
  InferenceContext(const Node* node, const OpDef* op_def, const std::vector<const ShapeAndType*>& inputs,
                   const absl::flat_hash_map<std::string, const AttrValue*>& attrs)
      : node_(node), op_def_(op_def), inputs_(inputs), attrs_(attrs) {}

  const Node& node() const { return *node_; }
  const OpDef& op_def() const { return *op_def_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorShape& input_shape(int i) const { return inputs_[i]->shape; }
  DataType input_dtype(int i) const { return inputs_[i]->dtype; }

  int64_t GetInt(absl::string_view name) const;
  float GetFloat(absl::string_view name) const;
  const std::string& GetString(absl::string_view name) const;
  bool GetBool(absl::string_view name) const;
  DataType GetType(absl::string_view name) const;
  const TensorShapeProto& GetShape(absl::string_view name) const;
  const TensorProto& GetTensor(absl::string_view name) const;
  std::vector<int64_t> GetIntList(absl::string_view name) const;
  const AttrValue& GetAttr(absl::string_view name) const;

 private:
  const Node* node_;
  const OpDef* op_def_;
  const std::vector<const ShapeAndType*>& inputs_;
  const absl::flat_hash_map<std::string, const AttrValue*>& attrs_;
};

// Returns the op's outputs, or an error naming what disagrees (both shapes).
using ShapeFn = std::function<absl::StatusOr<std::vector<ShapeAndType>>(const InferenceContext&)>;

// Given the gradients flowing into a node's outputs, adds the nodes that
// compute the gradients of its inputs and returns one per input (nullopt where
// none flows, e.g. into integer labels). See ops/gradient_builder.h.
class GradientBuilder;
using GradFn = std::function<absl::StatusOr<std::vector<std::optional<NodeOut>>>(GradientBuilder&)>;

// Forward floating-point operations for one sample: unknown (batch)
// dimensions count as 1. A multiply-add is two operations.
using CostFn =
    std::function<int64_t(const InferenceContext&, const std::vector<ShapeAndType>& outputs)>;

struct OpDef {
  std::string name;
  std::string summary;
  std::vector<ArgSpec> inputs;
  std::vector<std::string> outputs;
  // True for ops with one output per input (OutputList): `outputs` holds the
  // list's one name and a node has as many outputs as inputs.
  bool output_per_input = false;
  std::vector<AttrSpec> attrs;
  ShapeFn shape_fn;
  CostFn cost_fn;
  // True for Feedback: its input edge may close a cycle (the loop's back edge),
  // and shape inference reads its output from attributes.
  bool closes_cycles = false;
  // How gradients flow back through the op; ops with none say why in
  // `no_gradient` (a test checks every op has one or the other).
  GradFn grad_fn;
  std::string no_gradient;
  // (input, output) pairs: output `second` is the next value of the state
  // Parameter feeding input `first` (batch norm's running statistics). The
  // optimizer pass wires each through a Feedback to that Parameter.
  std::vector<std::pair<int, int>> state_updates;
  // True for ops that communicate with other ranks (the executor hands their
  // kernels the collective queue of the group their `group` attribute names,
  // "" or absent: the whole world); each such node has an issue position
  // (`bucket`) in its group's per-step order.
  bool collective = false;
  // True for ops that talk to other ranks: the collectives, and the
  // point-to-point transfers (Send, Recv, the coded ends), which have no issue
  // order. Their kernels work on host memory (the place pass keeps them on
  // the host).
  bool communicates = false;
  // True for ops whose every output element depends only on the same element
  // of each input, scalars (rank 0) broadcast: a value can be cut into pieces
  // and the op applied to each (the parameter server updates a parameter
  // chunk by chunk as each chunk's gradients arrive).
  bool elementwise = false;

  const AttrSpec* FindAttr(absl::string_view attr_name) const;
  // The signature entry input `port` belongs to. Registration guarantees an
  // input list comes last, so every port past it maps onto the list.
  const ArgSpec& InputArg(int port) const;
  // "a" for a fixed input, "values[2]" for an element of an input list.
  std::string InputName(int port) const;
  // How many data inputs the op accepts: [min, max]; max is -1 if unbounded.
  int MinInputs() const;
  int MaxInputs() const;
  // "(a, b)" or "(values...)" for errors and --help.
  std::string InputSignature() const;
  // How many outputs a node of this op with `num_inputs` inputs has.
  int NumOutputs(int num_inputs) const {
    return output_per_input ? num_inputs : static_cast<int>(outputs.size());
  }
};

class OpDefBuilder {
 public:
  explicit OpDefBuilder(std::string name);

  OpDefBuilder& Summary(std::string text);
  OpDefBuilder& Input(std::string name, std::vector<DataType> allowed_types = {});
  OpDefBuilder& InputList(std::string name, int min_count, std::vector<DataType> allowed_types = {});
  OpDefBuilder& Output(std::string name);
  // One output per input (an op over a list of tensors, e.g. a gradient
  // bucket's allreduce); the op's only output declaration.
  OpDefBuilder& OutputList(std::string name);
  // An optional attribute with its default.
  OpDefBuilder& Attr(std::string name, AttrType type, AttrValue default_value, std::string doc = "");
  // An attribute the node must set.
  OpDefBuilder& RequiredAttr(std::string name, AttrType type, std::string doc = "");
  // A string attribute restricted to `allowed` (the default must be one).
  OpDefBuilder& EnumAttr(std::string name, std::vector<std::string> allowed, std::string default_value,
                         std::string doc = "");
  OpDefBuilder& ClosesCycles();
  // The op is a collective (OpDef::collective; it also communicates).
  OpDefBuilder& Collective();
  // The op talks to other ranks outside the collectives' order
  // (OpDef::communicates): point-to-point transfers.
  OpDefBuilder& Communicates();
  // The op is elementwise (OpDef::elementwise).
  OpDefBuilder& Elementwise();
  OpDefBuilder& SetShapeFn(ShapeFn fn);
  OpDefBuilder& SetCostFn(CostFn fn);
  OpDefBuilder& SetGradient(GradFn fn);
  // The op passes no gradient to its inputs, and why (shown by `nereid ops`).
  OpDefBuilder& NoGradient(std::string reason);
  // Output `output` is the next value of the state fed to input `input`.
  OpDefBuilder& UpdatesState(int input, int output);

  OpDef Build() const { return def_; }

 private:
  OpDef def_;
};

class OpRegistry {
 public:
  static OpRegistry& Global();

  // Fails on a duplicate name or a record without a shape function.
  absl::Status Register(OpDef def);
  const OpDef* Find(absl::string_view name) const;
  // Sorted op names.
  std::vector<std::string> OpNames() const;

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_;
};

// Registers at static-initialisation time; a bad registration is a
// programming error and aborts with its message.
// The node's attributes with the op's defaults filled in (what shape
// functions and kernels read).
using AttrMap = absl::flat_hash_map<std::string, const AttrValue*>;
AttrMap AttrsWithDefaults(const Node& node, const OpDef& def);

// AttrValue constructors for defaults.
AttrValue IntAttr(int64_t v);
AttrValue FloatAttr(float v);
AttrValue StringAttr(std::string v);
AttrValue BoolAttr(bool v);
AttrValue TypeAttr(DataType v);
AttrValue IntListAttr(std::vector<int64_t> v);
AttrValue ShapeAttr(std::vector<int64_t> dims);

}  // namespace nereid

#define NEREID_REGISTER_OP(builder) NEREID_REGISTER(::nereid::OpRegistry, (builder).Build())

#endif  // NEREID_OPS_OP_REGISTRY_H_
