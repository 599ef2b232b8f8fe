#include "graph/onnx/shape_folding.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
constexpr double kBatch = std::numeric_limits<double>::infinity();
// Not a number: unknown (NaN), or the batch (+inf, kept by copying ops and
// lost by arithmetic, so an entry still +inf is exactly the batch).
bool Unknown(double v) { return !std::isfinite(v); }

bool IsInteger(int32_t type) {
  return type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32 || type == onnx::TensorProto::BOOL ||
         type == onnx::TensorProto::UINT8 || type == onnx::TensorProto::INT8;
}

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::Status Malformed(const onnx::NodeProto& node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("ONNX node '", node.name(), "' (", node.op_type(), "): ", what));
}

const onnx::AttributeProto* FindAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t IntAttr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const onnx::AttributeProto* a = FindAttr(node, name);
  return a == nullptr ? fallback : a->i();
}

// Axes from an attribute (older opsets) or input `input` (newer ones).
std::optional<std::vector<int64_t>> AxesOf(const onnx::NodeProto& node, const std::vector<FoldedValue>& in, int input) {
  if (const onnx::AttributeProto* a = FindAttr(node, "axes")) return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  if (static_cast<int>(in.size()) > input) {
    std::vector<int64_t> axes;
    for (double v : in[input].values) axes.push_back(static_cast<int64_t>(v));
    return axes;
  }
  return std::nullopt;
}

int64_t Normalize(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

absl::StatusOr<FoldedValue> Checked(const onnx::NodeProto& node, FoldedValue v) {
  if (static_cast<int64_t>(v.values.size()) != Count(v.dims)) return Malformed(node, "folded value has the wrong size");
  return v;
}

// NumPy broadcasting of two small tensors through `f`.
template <typename F>
absl::StatusOr<FoldedValue> Broadcast(const onnx::NodeProto& node, const FoldedValue& a, const FoldedValue& b,
                                      int32_t type, F f) {
  const size_t rank = std::max(a.dims.size(), b.dims.size());
  std::vector<int64_t> da(rank, 1), db(rank, 1), out(rank);
  std::copy(a.dims.begin(), a.dims.end(), da.end() - a.dims.size());
  std::copy(b.dims.begin(), b.dims.end(), db.end() - b.dims.size());
  for (size_t i = 0; i < rank; ++i) {
    if (da[i] != db[i] && da[i] != 1 && db[i] != 1) return Malformed(node, "operands do not broadcast");
    out[i] = std::max(da[i], db[i]);
  }
  FoldedValue r;
  r.elem_type = type;
  r.dims = out;
  const int64_t n = Count(out);
  if (n > kMaxFoldedElements) return Malformed(node, "folded value too large");
  r.values.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t ia = 0, ib = 0, sa = 1, sb = 1, rest = i;
    for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
      const int64_t idx = rest % out[d];
      rest /= out[d];
      ia += (da[d] == 1 ? 0 : idx) * sa;
      ib += (db[d] == 1 ? 0 : idx) * sb;
      sa *= da[d];
      sb *= db[d];
    }
    r.values[i] = f(a.values[ia], b.values[ib]);
  }
  return r;
}

// Elements [begin, end) in steps of `step` along `axis` (ONNX Slice's
// clamping already applied).
FoldedValue SliceAxis(const FoldedValue& v, int64_t axis, int64_t begin, int64_t end, int64_t step) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= v.dims[i];
  for (size_t i = axis + 1; i < v.dims.size(); ++i) inner *= v.dims[i];
  std::vector<int64_t> picks;
  for (int64_t k = begin; step > 0 ? k < end : k > end; k += step) picks.push_back(k);
  FoldedValue r = v;
  r.dims[axis] = static_cast<int64_t>(picks.size());
  r.values.clear();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k : picks) {
      for (int64_t i = 0; i < inner; ++i) r.values.push_back(v.values[(o * v.dims[axis] + k) * inner + i]);
    }
  }
  return r;
}

absl::StatusOr<std::optional<std::vector<FoldedValue>>> Fold(const onnx::NodeProto& node,
                                                             const std::vector<FoldedValue>& in,
                                                             const FoldingInputs& lookup) {
  const std::string& op = node.op_type();
  using Result = std::optional<std::vector<FoldedValue>>;
  auto one = [&](FoldedValue v) -> absl::StatusOr<Result> {
    absl::StatusOr<FoldedValue> checked = Checked(node, std::move(v));
    if (!checked.ok()) return checked.status();
    return Result(std::vector<FoldedValue>{*std::move(checked)});
  };
  if (op == "Shape") {
    std::optional<std::vector<int64_t>> dims = lookup.dims(node.input(0));
    if (!dims) return Result();
    const int64_t rank = static_cast<int64_t>(dims->size());
    int64_t start = std::clamp<int64_t>(Normalize(IntAttr(node, "start", 0), rank), 0, rank);
    int64_t end = std::clamp<int64_t>(Normalize(IntAttr(node, "end", rank), rank), 0, rank);
    FoldedValue r;
    for (int64_t i = start; i < end; ++i) {
      const int64_t d = (*dims)[i];
      r.values.push_back(d == kBatchDim ? kBatch : d < 0 ? kUnknown : static_cast<double>(d));
    }
    r.dims = {static_cast<int64_t>(r.values.size())};
    return one(r);
  }
  // Every other op needs every input known.
  for (int i = 0; i < node.input_size(); ++i) {
    if (!node.input(i).empty() && (i >= static_cast<int>(in.size()) || in[i].values.size() != static_cast<size_t>(Count(in[i].dims)))) {
      return Result();
    }
  }
  if (in.empty() && op != "ConstantOfShape" && op != "Constant") return Result();
  if (op == "Identity") return one(in[0]);
  if (op == "Cast") {
    FoldedValue r = in[0];
    r.elem_type = static_cast<int32_t>(IntAttr(node, "to", onnx::TensorProto::INT64));
    if (IsInteger(r.elem_type)) {
      for (double& v : r.values) v = std::trunc(v);
    }
    return one(r);
  }
  if (op == "Gather") {
    const FoldedValue& data = in[0];
    const FoldedValue& idx = in[1];
    if (data.dims.empty()) return Malformed(node, "gathers from a scalar");
    const int64_t axis = Normalize(IntAttr(node, "axis", 0), static_cast<int64_t>(data.dims.size()));
    if (axis < 0 || axis >= static_cast<int64_t>(data.dims.size())) return Malformed(node, "axis out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= data.dims[i];
    for (size_t i = axis + 1; i < data.dims.size(); ++i) inner *= data.dims[i];
    FoldedValue r;
    r.elem_type = data.elem_type;
    r.dims.assign(data.dims.begin(), data.dims.begin() + axis);
    r.dims.insert(r.dims.end(), idx.dims.begin(), idx.dims.end());
    r.dims.insert(r.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
    for (int64_t o = 0; o < outer; ++o) {
      for (double id : idx.values) {
        if (Unknown(id)) return Result();
        int64_t k = Normalize(static_cast<int64_t>(id), data.dims[axis]);
        if (k < 0 || k >= data.dims[axis]) return Malformed(node, absl::StrCat("index ", id, " is out of range"));
        for (int64_t i = 0; i < inner; ++i) r.values.push_back(data.values[(o * data.dims[axis] + k) * inner + i]);
      }
    }
    return one(r);
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::optional<std::vector<int64_t>> axes = AxesOf(node, in, 1);
    FoldedValue r = in[0];
    if (op == "Unsqueeze") {
      if (!axes) return Malformed(node, "no axes");
      const int64_t rank = static_cast<int64_t>(r.dims.size() + axes->size());
      std::vector<int64_t> sorted;
      for (int64_t a : *axes) sorted.push_back(Normalize(a, rank));
      std::sort(sorted.begin(), sorted.end());
      for (int64_t a : sorted) {
        if (a < 0 || a > static_cast<int64_t>(r.dims.size())) return Malformed(node, "axis out of range");
        r.dims.insert(r.dims.begin() + a, 1);
      }
    } else {
      const int64_t rank = static_cast<int64_t>(r.dims.size());
      std::vector<int64_t> kept;
      for (int64_t i = 0; i < rank; ++i) {
        bool squeezed = !axes ? r.dims[i] == 1 : false;
        if (axes) {
          for (int64_t a : *axes) squeezed |= Normalize(a, rank) == i;
        }
        if (!squeezed) kept.push_back(r.dims[i]);
      }
      r.dims = kept;
    }
    return one(r);
  }
  if (op == "Transpose") {
    const FoldedValue& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    std::vector<int64_t> perm;
    if (const onnx::AttributeProto* a = FindAttr(node, "perm")) perm.assign(a->ints().begin(), a->ints().end());
    if (perm.empty()) {
      for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    }
    if (static_cast<int64_t>(perm.size()) != rank) return Malformed(node, "perm does not match the rank");
    std::vector<int64_t> strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * x.dims[d + 1];
    FoldedValue r;
    r.elem_type = x.elem_type;
    for (int64_t p : perm) {
      if (p < 0 || p >= rank) return Malformed(node, "perm out of range");
      r.dims.push_back(x.dims[p]);
    }
    for (int64_t i = 0; i < static_cast<int64_t>(x.values.size()); ++i) {
      int64_t rest = i, offset = 0;
      for (int64_t d = rank - 1; d >= 0; --d) {
        offset += (rest % r.dims[d]) * strides[perm[d]];
        rest /= r.dims[d];
      }
      r.values.push_back(x.values[offset]);
    }
    return one(r);
  }
  if (op == "Concat") {
    FoldedValue r = in[0];
    const int64_t rank = static_cast<int64_t>(r.dims.size());
    if (rank != 1) return Result();  // shape vectors only
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i].dims.size() != 1) return Result();
      r.values.insert(r.values.end(), in[i].values.begin(), in[i].values.end());
    }
    r.dims = {static_cast<int64_t>(r.values.size())};
    return one(r);
  }
  if (op == "Slice") {
    if (in.size() < 3) return Result();  // opset < 10 keeps bounds in attributes: converted, not folded
    FoldedValue r = in[0];
    const size_t n = in[1].values.size();
    for (size_t k = 0; k < n; ++k) {
      const int64_t rank = static_cast<int64_t>(r.dims.size());
      const int64_t axis = Normalize(in.size() > 3 ? static_cast<int64_t>(in[3].values[k]) : static_cast<int64_t>(k), rank);
      const int64_t step = in.size() > 4 ? static_cast<int64_t>(in[4].values[k]) : 1;
      if (axis < 0 || axis >= rank || step == 0) return Malformed(node, "bad axis or step");
      const int64_t dim = r.dims[axis];
      auto clamp = [&](double v) {
        int64_t x = v >= 9.2e18 ? std::numeric_limits<int64_t>::max() : (v <= -9.2e18 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(v));
        if (x < 0 && x > std::numeric_limits<int64_t>::min()) x += dim;
        if (step > 0) return std::clamp<int64_t>(x, 0, dim);
        return std::clamp<int64_t>(x, -1, dim - 1);
      };
      r = SliceAxis(r, axis, clamp(in[1].values[k]), clamp(in[2].values[k]), step);
    }
    return one(r);
  }
  if (op == "Reshape") {
    FoldedValue r = in[0];
    std::vector<int64_t> target;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < in[1].values.size(); ++i) {
      int64_t d = static_cast<int64_t>(in[1].values[i]);
      if (d == 0 && IntAttr(node, "allowzero", 0) == 0 && i < r.dims.size()) d = r.dims[i];
      if (d == -1) {
        infer = static_cast<int64_t>(i);
      } else {
        known *= d;
      }
      target.push_back(d);
    }
    if (infer >= 0) target[infer] = known == 0 ? 0 : static_cast<int64_t>(r.values.size()) / known;
    r.dims = target;
    return one(r);
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" || op == "Less" ||
      op == "Greater" || op == "Max" || op == "Min" || op == "Mod") {
    if (in.size() != 2) return Result();
    const bool integer = IsInteger(in[0].elem_type);
    const bool compare = op == "Equal" || op == "Less" || op == "Greater";
    const bool c_remainder = IntAttr(node, "fmod", 0) != 0;  // Mod's sign follows the dividend
    const int32_t type = compare ? static_cast<int32_t>(onnx::TensorProto::BOOL) : in[0].elem_type;
    absl::StatusOr<FoldedValue> r = Broadcast(node, in[0], in[1], type, [&](double a, double b) -> double {
      if (Unknown(a) || Unknown(b)) return kUnknown;
      if (op == "Add") return a + b;
      if (op == "Sub") return a - b;
      if (op == "Mul") return a * b;
      if (op == "Div") return !integer ? a / b : (b == 0 ? kUnknown : std::trunc(a / b));
      if (op == "Mod") return b == 0 ? kUnknown : (c_remainder ? std::fmod(a, b) : a - b * std::floor(a / b));
      if (op == "Max") return std::max(a, b);
      if (op == "Min") return std::min(a, b);
      if (op == "Equal") return a == b;
      if (op == "Less") return a < b;
      return a > b;
    });
    if (!r.ok()) return r.status();
    return one(*std::move(r));
  }
  if (op == "Where") {
    if (in.size() != 3) return Result();
    absl::StatusOr<FoldedValue> picked_a =
        Broadcast(node, in[0], in[1], in[1].elem_type, [](double c, double a) { return c != 0 ? a : kUnknown; });
    if (!picked_a.ok()) return picked_a.status();
    absl::StatusOr<FoldedValue> cond =
        Broadcast(node, in[0], in[2], in[2].elem_type, [](double c, double b) { return c != 0 ? kUnknown : b; });
    if (!cond.ok()) return cond.status();
    // Each element comes from exactly one side: merge where the other is unknown.
    absl::StatusOr<FoldedValue> merged = Broadcast(node, *picked_a, *cond, in[1].elem_type, [](double a, double b) {
      return Unknown(a) ? b : a;
    });
    if (!merged.ok()) return merged.status();
    return one(*std::move(merged));
  }
  if (op == "ConstantOfShape") {
    FoldedValue r;
    r.elem_type = onnx::TensorProto::FLOAT;
    double fill = 0;
    if (const onnx::AttributeProto* a = FindAttr(node, "value")) {
      absl::StatusOr<FoldedValue> v = FoldedValue::FromTensor(a->t());
      if (!v.ok()) return v.status();
      if (v->values.size() != 1) return Malformed(node, "value must hold one element");
      r.elem_type = v->elem_type;
      fill = v->values[0];
    }
    bool varies = false;
    for (double d : in[0].values) {
      if (!Unknown(d) && d < 0) return Malformed(node, "negative dimension");
      varies |= Unknown(d);
      r.dims.push_back(Unknown(d) ? -1 : static_cast<int64_t>(d));
    }
    if (varies) {  // a size that varies: only its value is known
      r.uniform = fill;
      return Result(std::vector<FoldedValue>{r});
    }
    if (Count(r.dims) > kMaxFoldedElements) return Malformed(node, "folded value too large");
    r.values.assign(Count(r.dims), fill);
    return one(r);
  }
  if (op == "Range") {
    if (in.size() != 3) return Result();
    const double start = in[0].values.at(0), limit = in[1].values.at(0), delta = in[2].values.at(0);
    if (Unknown(start) || Unknown(limit) || Unknown(delta)) return Result();
    if (delta == 0) return Malformed(node, "delta 0");
    const double n = std::max(0.0, std::ceil((limit - start) / delta));
    if (n > static_cast<double>(kMaxFoldedElements)) return Malformed(node, "folded value too large");
    FoldedValue r;
    r.elem_type = in[0].elem_type;
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) r.values.push_back(start + static_cast<double>(i) * delta);
    r.dims = {static_cast<int64_t>(r.values.size())};
    return one(r);
  }
  if (op == "Expand" && in.size() == 2 && in[0].FullyKnown() && !in[1].FullyKnown() && !in[0].values.empty() &&
      std::all_of(in[0].values.begin(), in[0].values.end(), [&](double v) { return v == in[0].values[0]; })) {
    FoldedValue r;  // one repeated value to a shape that varies
    r.elem_type = in[0].elem_type;
    r.uniform = in[0].values[0];
    for (double d : in[1].values) r.dims.push_back(Unknown(d) ? -1 : static_cast<int64_t>(d));
    return Result(std::vector<FoldedValue>{r});
  }
  if (op == "Expand") {
    FoldedValue shape;
    shape.dims = {static_cast<int64_t>(in[1].values.size())};
    for (double d : in[1].values) {
      if (Unknown(d)) return Result();
    }
    FoldedValue ones;
    ones.elem_type = in[0].elem_type;
    for (double d : in[1].values) ones.dims.push_back(static_cast<int64_t>(d));
    if (Count(ones.dims) > kMaxFoldedElements) return Malformed(node, "folded value too large");
    ones.values.assign(Count(ones.dims), 1);
    absl::StatusOr<FoldedValue> r = Broadcast(node, in[0], ones, in[0].elem_type, [](double a, double) { return a; });
    if (!r.ok()) return r.status();
    return one(*std::move(r));
  }
  return Result();
}

}  // namespace

bool IsFoldableOp(const std::string& op_type) {
  static const char* const kOps[] = {"Shape", "Identity", "Cast", "Gather", "Unsqueeze", "Squeeze", "Concat", "Transpose",
                                     "Slice", "Reshape", "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal",
                                     "Less", "Greater", "Where", "ConstantOfShape", "Range", "Expand"};
  for (const char* op : kOps) {
    if (op_type == op) return true;
  }
  return false;
}

bool FoldedValue::FullyKnown() const {
  if (static_cast<int64_t>(values.size()) != Count(dims)) return false;  // a uniform value of varying size
  for (double v : values) {
    if (Unknown(v)) return false;
  }
  return true;
}

int64_t FoldedValue::num_elements() const { return static_cast<int64_t>(values.size()); }

onnx::TensorProto FoldedValue::ToTensor(const std::string& name) const {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(elem_type);
  for (int64_t d : dims) t.add_dims(d);
  for (double v : values) {
    switch (elem_type) {
      case onnx::TensorProto::FLOAT: t.add_float_data(static_cast<float>(v)); break;
      case onnx::TensorProto::DOUBLE: t.add_double_data(v); break;
      case onnx::TensorProto::INT64: t.add_int64_data(static_cast<int64_t>(v)); break;
      default: t.add_int32_data(static_cast<int32_t>(v)); break;  // int32, bool, uint8, int8
    }
  }
  return t;
}

absl::StatusOr<FoldedValue> FoldedValue::FromTensor(const onnx::TensorProto& t) {
  FoldedValue v;
  v.elem_type = t.data_type();
  v.dims.assign(t.dims().begin(), t.dims().end());
  for (int64_t d : v.dims) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
  }
  const int64_t n = Count(v.dims);
  if (n > kMaxFoldedElements) return absl::InvalidArgumentError("too large to fold");
  const std::string& raw = t.raw_data();
  auto read = [&](auto as, const auto& field) -> absl::Status {
    using T = decltype(as);
    if (!raw.empty()) {
      if (raw.size() != static_cast<size_t>(n) * sizeof(T)) return absl::InvalidArgumentError("raw data has the wrong size");
      for (int64_t i = 0; i < n; ++i) {
        T x;
        std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
        v.values.push_back(static_cast<double>(x));
      }
      return absl::OkStatus();
    }
    if (static_cast<int64_t>(field.size()) != n) return absl::InvalidArgumentError("holds the wrong number of values");
    for (const auto& x : field) v.values.push_back(static_cast<double>(x));
    return absl::OkStatus();
  };
  absl::Status status;
  switch (v.elem_type) {
    case onnx::TensorProto::FLOAT: status = read(float{}, t.float_data()); break;
    case onnx::TensorProto::DOUBLE: status = read(double{}, t.double_data()); break;
    case onnx::TensorProto::INT64: status = read(int64_t{}, t.int64_data()); break;
    case onnx::TensorProto::INT32: status = read(int32_t{}, t.int32_data()); break;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::UINT8: status = read(uint8_t{}, t.int32_data()); break;
    case onnx::TensorProto::INT8: status = read(int8_t{}, t.int32_data()); break;
    default: return absl::UnimplementedError("element type not folded");
  }
  if (!status.ok()) return status;
  return v;
}

absl::StatusOr<std::optional<std::vector<FoldedValue>>> TryFold(const onnx::NodeProto& node,
                                                                const FoldingInputs& inputs) {
  // Ops it never evaluates are turned away before their inputs are read.
  if ((!node.domain().empty() && node.domain() != "ai.onnx") || !IsFoldableOp(node.op_type())) {
    return std::optional<std::vector<FoldedValue>>();
  }
  std::vector<FoldedValue> in;
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty()) {
      in.emplace_back();  // an omitted optional input
      in.back().dims = {0};
      continue;
    }
    std::optional<FoldedValue> v = inputs.value(node.input(i));
    if (!v) {
      if (node.op_type() == "Shape") break;  // Shape reads only dims
      return std::optional<std::vector<FoldedValue>>();
    }
    in.push_back(*std::move(v));
  }
  return Fold(node, in, inputs);
}

}  // namespace nereid
