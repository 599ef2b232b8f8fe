#include "passes/split_block.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/errors.h"

namespace nereid {
namespace {

// Ops between the layers that leave every axis where it was.
const absl::flat_hash_set<std::string>& Unary() {
  static const auto* ops = new absl::flat_hash_set<std::string>{"Relu", "Sigmoid", "Tanh", "Gelu", "Dropout",
                                                                "Identity"};
  return *ops;
}
const absl::flat_hash_set<std::string>& Binary() {
  static const auto* ops = new absl::flat_hash_set<std::string>{"Add", "Sub", "Mul", "Div", "BiasAdd"};
  return *ops;
}

bool MayBeBetween(const Node& n) {
  return Unary().contains(n.op()) || Binary().contains(n.op()) || n.op() == "Reshape" || n.op() == "Transpose" ||
         n.op() == "Softmax" || n.op() == "CausalMask" || n.op() == "BatchMatMul";
}

// A value that does not come from the activations: a constant or a parameter.
bool IsSideInput(const Node& n) { return n.op() == "Const" || n.op() == "Parameter"; }

absl::Status NotABlock(const Node& rows, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat(rows.name(), ": ", why));
}

const TensorShape& ShapeOf(const Edge& e) { return e.src->outputs()[e.src_port].shape; }

std::vector<int64_t> IntList(const Node& n, const char* key) {
  std::vector<int64_t> v;
  auto it = n.def().attr().find(key);
  if (it != n.def().attr().end()) v.assign(it->second.list().i().begin(), it->second.list().i().end());
  return v;
}

// The product of dims [from, to), or -1 when one of them is unknown.
int64_t Product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) {
    if (dims[i] == kUnknownDim) return -1;
    p *= dims[i];
  }
  return p;
}

// Where a reshape puts input axis `axis`'s blocks: the output axis whose
// trailing extent equals the input's from `axis` on. A block of `axis` is a
// contiguous run of tail / group elements in every row of the leading axes,
// and so is a block of that output axis (e.g. [B, T, 256] -> [B, T, 4, 64]:
// axis 2's blocks are blocks of the 4 heads). -1 when no axis matches.
int ReshapedAxis(const std::vector<int64_t>& in, const std::vector<int64_t>& out, int axis) {
  const int64_t tail = Product(in, axis, in.size());
  if (tail < 0) return -1;
  for (int b = static_cast<int>(out.size()) - 1; b >= 0; --b) {
    const int64_t out_tail = Product(out, b, out.size());
    if (out_tail < 0 || out_tail > tail) return -1;
    if (out_tail == tail) return b;
  }
  return -1;
}

// Follows the cut from the columns' outputs through `between` to the rows.
class CutFollower {
 public:
  CutFollower(const Node& rows, SplitBlock& block) : rows_(rows), block_(block) {}

  absl::Status Follow() {
    for (Node* c : block_.columns) cut_[c] = c->outputs()[0].shape.rank() - 1;
    for (Node* n : block_.between) {
      ASSIGN_OR_RETURN(int axis, Through(*n));
      cut_[n] = axis;
    }
    const Edge* in = rows_.input_edge(0);
    auto it = cut_.find(in->src);
    if (it == cut_.end() || it->second != ShapeOf(*in).rank() - 1) {
      return NotABlock(rows_, "its input is not cut along the axis it contracts");
    }
    return absl::OkStatus();
  }

 private:
  // The cut axis of input `port` of `n`, or -1 for a side input.
  int CutOf(const Node& n, int port) const {
    auto it = cut_.find(n.input_edge(port)->src);
    return it == cut_.end() ? -1 : it->second;
  }

  absl::StatusOr<int> Through(Node& n) {
    const int a = CutOf(n, 0);
    const int rank = n.outputs()[0].shape.rank();
    if (Binary().contains(n.op())) return Elementwise(n);
    if (a < 0) return NotABlock(rows_, absl::StrCat(n.name(), " computes from constants, not from the layers"));
    if (Unary().contains(n.op())) return a;
    if (n.op() == "CausalMask") {
      if (a >= rank - 2) return NotABlock(rows_, absl::StrCat(n.name(), " masks the cut axis"));
      return a;
    }
    if (n.op() == "Softmax") {
      int64_t axis = NodeAttrInt(n, "axis", -1);
      if (axis < 0) axis += rank;
      if (axis == a) return NotABlock(rows_, absl::StrCat(n.name(), " normalises along the cut axis"));
      return a;
    }
    if (n.op() == "Transpose") {
      std::vector<int64_t> perm = IntList(n, "perm");
      if (perm.empty()) return rank - 1 - a;
      return static_cast<int>(std::find(perm.begin(), perm.end(), a) - perm.begin());
    }
    if (n.op() == "Reshape") {
      const int b = ReshapedAxis(ShapeOf(*n.input_edge(0)).dims(), n.outputs()[0].shape.dims(), a);
      if (b < 0) return NotABlock(rows_, absl::StrCat(n.name(), " reshapes the cut axis across others"));
      block_.cut_reshapes.emplace_back(&n, b);
      return b;
    }
    // BatchMatMul of two cut values: the cut must be a batch axis of both.
    const int b = CutOf(n, 1);
    if (a != b || a < 0 || a >= rank - 2 || ShapeOf(*n.input_edge(1)).rank() != rank ||
        ShapeOf(*n.input_edge(0)).rank() != rank) {
      return NotABlock(rows_, absl::StrCat(n.name(), " contracts the cut axis or mixes cut and whole inputs"));
    }
    return a;
  }

  // Add, Mul, ... of cut inputs (all along one axis) and side inputs: a side
  // input spanning the cut axis is a parameter (a bias) and is cut with it.
  absl::StatusOr<int> Elementwise(Node& n) {
    const int rank = n.outputs()[0].shape.rank();
    int axis = -1;
    for (int port = 0; port < n.num_inputs(); ++port) {
      const int a = CutOf(n, port);
      if (a < 0) continue;
      if (axis >= 0 && a != axis) return NotABlock(rows_, absl::StrCat(n.name(), " adds values cut along different axes"));
      if (ShapeOf(*n.input_edge(port)).rank() != rank) {
        return NotABlock(rows_, absl::StrCat(n.name(), " broadcasts a cut value"));
      }
      axis = a;
    }
    if (axis < 0) return NotABlock(rows_, absl::StrCat(n.name(), " computes from constants, not from the layers"));
    for (int port = 0; port < n.num_inputs(); ++port) {
      if (CutOf(n, port) >= 0) continue;
      Node* side = n.input_edge(port)->src;
      const std::vector<int64_t>& dims = ShapeOf(*n.input_edge(port)).dims();
      // BiasAdd's bias runs along axis 1; a broadcast aligns trailing axes.
      const int aligned = n.op() == "BiasAdd" ? axis - 1 : axis - (rank - static_cast<int>(dims.size()));
      if (aligned < 0 || aligned >= static_cast<int>(dims.size()) || dims[aligned] == 1) continue;
      if (side->op() != "Parameter" || side->out_edges().size() != 1) {
        return NotABlock(rows_, absl::StrCat(n.name(), "'s input '", side->name(),
                                             "' spans the cut axis and is not a parameter of its own"));
      }
      block_.cut_parameters.emplace_back(side, aligned);
    }
    return axis;
  }

  const Node& rows_;
  SplitBlock& block_;
  absl::flat_hash_map<const Node*, int> cut_;
};

}  // namespace

bool IsDenseLayer(const Node& n) {
  if (n.op() != "MatMul" && n.op() != "BatchMatMul") return false;
  if (NodeAttrBool(n, "transpose_a", false) || NodeAttrBool(n, "transpose_b", false)) return false;
  if (n.num_inputs() != 2 || n.input_edge(0) == nullptr || n.input_edge(1) == nullptr) return false;
  const Node* w = n.input_edge(1)->src;
  const TensorShape& shape = w->outputs()[0].shape;
  return w->op() == "Parameter" && shape.rank() == 2 && shape.IsFullyDefined() && ShapeOf(*n.input_edge(0)).rank() >= 2;
}

Node* WeightOf(const Node& dense) { return dense.input_edge(1)->src; }

absl::StatusOr<SplitBlock> FindSplitBlock(Node* rows, const absl::flat_hash_set<const Node*>& candidates,
                                          const std::vector<Node*>& order) {
  constexpr size_t kMostBetween = 64;  // a block is a few layers, not a network
  SplitBlock block;
  block.rows = rows;
  absl::flat_hash_set<const Node*> columns, between;
  std::vector<Node*> stack = {rows->input_edge(0)->src};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (columns.contains(n) || between.contains(n)) continue;
    if (IsDenseLayer(*n)) {
      if (!candidates.contains(n)) {
        return NotABlock(*rows, absl::StrCat("the layer before it, ", n->name(), ", is not one to cut"));
      }
      columns.insert(n);
      continue;
    }
    if (!MayBeBetween(*n)) return NotABlock(*rows, absl::StrCat("no layer to cut by columns before it (", n->name(),
                                                                 ", ", n->op(), ", comes first)"));
    if (between.size() == kMostBetween) return NotABlock(*rows, "no layer to cut by columns close before it");
    between.insert(n);
    for (int port = 0; port < n->num_inputs(); ++port) {
      Node* src = n->input_edge(port)->src;
      if (!IsSideInput(*src)) stack.push_back(src);
    }
  }
  // The columns read one input, and nothing outside the block reads theirs.
  for (Node* n : order) {
    if (columns.contains(n)) block.columns.push_back(n);
    if (between.contains(n)) block.between.push_back(n);
  }
  const Edge* input = block.columns.front()->input_edge(0);
  for (Node* c : block.columns) {
    const Edge* e = c->input_edge(0);
    if (e->src != input->src || e->src_port != input->src_port) {
      return NotABlock(*rows, absl::StrCat(block.columns.front()->name(), " and ", c->name(), " read different inputs"));
    }
  }
  for (const std::vector<Node*>* nodes : {&block.columns, &block.between}) {
    for (const Node* n : *nodes) {
      for (const Edge* e : n->out_edges()) {
        if (e->dst != rows && !between.contains(e->dst)) {
          return NotABlock(*rows, absl::StrCat(e->dst->name(), " reads ", n->name(), " from outside the block"));
        }
      }
    }
  }
  RETURN_IF_ERROR(CutFollower(*rows, block).Follow());
  return block;
}

absl::Status CutReshapes(Graph& graph, const SplitBlock& block, int64_t group) {
  for (auto [n, axis] : block.cut_reshapes) {
    auto& list = *(*n->mutable_def()->mutable_attr())["shape"].mutable_list()->mutable_i();
    if (list[axis] == kUnknownDim) continue;  // inferred: it follows the cut by itself
    if (list[axis] % group != 0) {
      return NodeError(graph, *n, absl::StrCat("hybrid_partition: the reshape's dimension ", axis, " (", list[axis],
                                               ") does not divide into ", group, " shards"));
    }
    list[axis] /= group;
  }
  return absl::OkStatus();
}

}  // namespace nereid
