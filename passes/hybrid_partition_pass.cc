// hybrid_partition: SplitBrain's layer-specific partitioning. Layers whose
// weights are small and compute heavy (convolutions) stay data parallel over
// every rank; the chosen fully connected layers, whose weights hold most of
// the memory, are sharded over a model-parallel group of `group_size` ranks.
//
// Layers are sharded in pairs, as in Megatron-LM's MLP block: the first
// column-wise, the second row-wise, so a pair costs one exchange each way.
// Each rank still feeds its own batch, so the pair works on the group's
// batches together:
//
//   x (own batch B) -> GroupAllGather -> [G*B, in]
//     -> MatMul(W1[:, block]) -> BiasAdd(b1[block]) -> Relu ...   (columns)
//     -> MatMul(W2[block, :]) -> [G*B, out], a partial sum         (rows)
//     -> GroupReduceScatter -> [B, out] summed over the group, own rows
//
// Only elementwise ops (Relu, Sigmoid, Tanh, Dropout, a BiasAdd of the
// first layer) may sit between the two layers of a pair. The collectives'
// gradients are their conjugates (ops/group_collective_ops.cc), so autodiff
// derives the backward communication. A shard's gradient sums the group's
// examples, so it is scaled by 1 / group_size, and averaged over the ranks
// holding the same shard (`replicas`) when the group is smaller than the
// world: the arithmetic is data parallelism's, up to rounding.
//
// Runs before autodiff. The world comes from the pass context's target (the
// world BuildPlan plans for: `--workers N`); the pass records its group in
// the plan's records (groups, model_parallel).

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "graph/process_groups.h"
#include "ops/gradient_builder.h"
#include "ops/topo_order.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

constexpr char kModelGroup[] = "model";
constexpr char kReplicaGroup[] = "replicas";

// The Parameter feeding input `port`, or null.
Node* ParameterInput(const Node& n, int port) {
  if (port >= n.num_inputs() || n.input_edge(port) == nullptr) return nullptr;
  Node* src = n.input_edge(port)->src;
  return src->op() == "Parameter" ? src : nullptr;
}

// A MatMul that multiplies an activation by a plain 2-D weight Parameter.
bool IsDenseLayer(const Node& n) {
  if (n.op() != "MatMul" || NodeAttrBool(n, "transpose_a", false) || NodeAttrBool(n, "transpose_b", false)) return false;
  Node* w = ParameterInput(n, 1);
  return w != nullptr && w->outputs()[0].shape.rank() == 2 && w->outputs()[0].shape.IsFullyDefined();
}

int64_t WeightElements(const Node& matmul) { return ParameterInput(matmul, 1)->outputs()[0].shape.KnownElements(); }

// The only data consumer of `n`'s output 0, or null.
Node* OnlyConsumer(const Node& n) {
  Node* only = nullptr;
  for (const Edge* e : n.out_edges()) {
    if (e->IsControl()) continue;
    if (only != nullptr || e->src_port != 0) return nullptr;
    only = e->dst;
  }
  return only;
}

struct Pair {
  Node* columns;                // the first layer: its weight is cut into column blocks
  Node* rows;                   // the second: row blocks
  Node* bias = nullptr;         // the first layer's BiasAdd parameter, cut like its columns
};

class HybridPartitionPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    const int64_t world = context.target.workers;
    if (world < 1) {
      return absl::FailedPreconditionError(
          "hybrid_partition: the plan does not say how many workers it is for (plan with --workers N)");
    }
    int64_t group = o.GetInt("group_size");
    if (group == 0) group = world;
    if (group < 1 || world % group != 0) {
      return absl::InvalidArgumentError(absl::StrCat("hybrid_partition: group_size ", group,
                                                     " does not divide the ", world, " workers"));
    }
    for (Node* n : graph.nodes()) {
      if (n->op() == "Gradient") return absl::FailedPreconditionError("hybrid_partition: runs before autodiff");
      if (n->op() == "GroupAllGather") return absl::FailedPreconditionError("hybrid_partition: applied twice");
    }
    ASSIGN_OR_RETURN(std::vector<Node*> chosen, ChooseLayers(graph, o));
    if (group == 1) {
      log->notes.push_back("group_size 1: nothing to shard, every layer stays data parallel");
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::vector<Pair> pairs, PairUp(graph, chosen, log));
    if (pairs.empty()) {
      log->notes.push_back("no pair of consecutive dense layers to shard: every layer stays data parallel");
      return absl::OkStatus();
    }
    const bool replicated = group < world;
    int64_t sharded = 0, total = 0;
    for (Node* n : graph.nodes()) {
      if (n->op() == "Parameter" && n->outputs()[0].shape.IsFullyDefined()) total += n->outputs()[0].shape.KnownElements();
    }
    for (const Pair& p : pairs) {
      RETURN_IF_ERROR(Shard(graph, *ParameterInput(*p.columns, 1), 1, group, replicated, sharded));
      if (p.bias != nullptr) RETURN_IF_ERROR(Shard(graph, *p.bias, 0, group, replicated, sharded));
      RETURN_IF_ERROR(Shard(graph, *ParameterInput(*p.rows, 1), 0, group, replicated, sharded));
      RETURN_IF_ERROR(Exchange(graph, p, group));
      log->notes.push_back(absl::StrCat(p.columns->name(), " split by columns and ", p.rows->name(),
                                        " by rows over ", group, " ranks"));
    }
    std::vector<GroupDecl> groups = {{kModelGroup, GroupLayout::kBlocks, static_cast<int>(group)}};
    if (replicated) groups.push_back({kReplicaGroup, GroupLayout::kStrided, static_cast<int>(group)});
    DeclareGroups(graph, groups);
    graph.mutable_header()->mutable_records()->set_model_parallel(static_cast<int32_t>(group));
    log->notes.push_back(absl::StrCat("each rank holds ", total - sharded + sharded / group, " of the model's ", total,
                                      " parameters (", sharded, " sharded ", group, " ways)"));
    return absl::OkStatus();
  }

 private:
  // The dense layers to shard: those named in `layers` (a MatMul node, or a
  // layer prefix whose "<prefix>/matmul" is one; joined by +), or every one whose weight
  // is at least min_kb.
  absl::StatusOr<std::vector<Node*>> ChooseLayers(Graph& graph, const PassOptions& o) {
    ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
    std::vector<Node*> dense;
    for (Node* n : order) {
      if (IsDenseLayer(*n)) dense.push_back(n);
    }
    const std::string& layers = o.GetString("layers");
    if (layers.empty()) {
      std::vector<Node*> chosen;
      for (Node* n : dense) {
        if (WeightElements(*n) * 4 >= o.GetFloat("min_kb") * 1024) chosen.push_back(n);
      }
      return chosen;
    }
    absl::flat_hash_set<const Node*> wanted;
    for (absl::string_view name : absl::StrSplit(layers, '+', absl::SkipWhitespace())) {
      Node* n = graph.FindNode(name);
      if (n == nullptr || n->op() != "MatMul") n = graph.FindNode(absl::StrCat(name, "/matmul"));
      if (n == nullptr || !IsDenseLayer(*n)) {
        std::vector<std::string> names;
        for (Node* d : dense) names.push_back(d->name());
        return absl::InvalidArgumentError(absl::StrCat("hybrid_partition: layers: '", name,
                                                       "' is not a dense layer of the model (they are: ",
                                                       absl::StrJoin(names, ", "), ")"));
      }
      wanted.insert(n);
    }
    std::vector<Node*> chosen;
    for (Node* n : dense) {
      if (wanted.contains(n)) chosen.push_back(n);
    }
    return chosen;
  }

  // Consecutive chosen layers joined by elementwise ops only become pairs.
  absl::StatusOr<std::vector<Pair>> PairUp(Graph& graph, const std::vector<Node*>& chosen, PassLog* log) {
    absl::flat_hash_set<const Node*> is_chosen(chosen.begin(), chosen.end());
    absl::flat_hash_set<const Node*> used;
    std::vector<Pair> pairs;
    for (Node* first : chosen) {
      if (used.contains(first)) continue;
      Pair p{first, nullptr, nullptr};
      for (Node* at = OnlyConsumer(*first); at != nullptr; at = OnlyConsumer(*at)) {
        if (at->op() == "MatMul") {
          if (is_chosen.contains(at) && !used.contains(at)) p.rows = at;
          break;
        }
        if (at->op() == "BiasAdd" && ParameterInput(*at, 1) != nullptr && p.bias == nullptr) {
          p.bias = ParameterInput(*at, 1);
        } else if (at->op() != "Relu" && at->op() != "Sigmoid" && at->op() != "Tanh" && at->op() != "Dropout") {
          break;
        }
      }
      if (p.rows == nullptr) {
        log->notes.push_back(absl::StrCat(first->name(), " has no dense layer right after it to pair with: it stays "
                                          "data parallel"));
        continue;
      }
      used.insert(first);
      used.insert(p.rows);
      pairs.push_back(std::move(p));
    }
    return pairs;
  }

  // Makes `param` a shard: block (group rank) of `group` along `axis`.
  absl::Status Shard(Graph& graph, Node& param, int axis, int64_t group, bool replicated, int64_t& sharded) {
    std::vector<int64_t> dims = param.outputs()[0].shape.dims();
    if (dims[axis] % group != 0) {
      return NodeError(graph, param,
                       absl::StrCat("hybrid_partition: dimension ", axis, " (", dims[axis], ") does not divide into ",
                                    group, " shards; choose a group_size that divides it or other layers"));
    }
    sharded += param.outputs()[0].shape.KnownElements();
    dims[axis] /= group;
    AttrValue shape;
    *shape.mutable_shape() = TensorShape(dims).ToProto();
    auto& attrs = *param.mutable_def()->mutable_attr();
    attrs["shape"] = shape;
    attrs["shard_group"] = StringAttr(kModelGroup);
    attrs["shard_axis"] = IntAttr(axis);
    attrs["shard_count"] = IntAttr(group);
    attrs["gradient_scale"] = FloatAttr(1.0f / static_cast<float>(group));
    if (replicated) attrs["replica_group"] = StringAttr(kReplicaGroup);
    return absl::OkStatus();
  }

  // The pair's exchanges: gather the batches before, reduce-scatter after.
  absl::Status Exchange(Graph& graph, const Pair& p, int64_t group) {
    std::vector<std::pair<std::string, AttrValue>> attrs = {{"group", StringAttr(kModelGroup)},
                                                            {"group_size", IntAttr(group)}};
    const Edge* in = p.columns->input_edge(0);
    ASSIGN_OR_RETURN(Node * gather, AddOpNode(&graph, absl::StrCat(p.columns->name(), "/gather"), "GroupAllGather",
                                              {NodeOut{in->src, in->src_port}}, attrs));
    RETURN_IF_ERROR(graph.ReplaceInput(p.columns, 0, gather, 0));
    std::vector<std::pair<Node*, int>> consumers;
    for (const Edge* e : p.rows->out_edges()) {
      if (!e->IsControl() && e->src_port == 0) consumers.emplace_back(e->dst, e->dst_port);
    }
    ASSIGN_OR_RETURN(Node * scatter, AddOpNode(&graph, absl::StrCat(p.rows->name(), "/reduce_scatter"),
                                               "GroupReduceScatter", {NodeOut{p.rows, 0}}, attrs));
    for (auto [dst, port] : consumers) RETURN_IF_ERROR(graph.ReplaceInput(dst, port, scatter, 0));
    return absl::OkStatus();
  }
};

PassInfo HybridPartitionInfo() {
  PassInfo info{"hybrid_partition",
                "SplitBrain: convolutions stay data parallel, pairs of large dense layers are sharded (columns, "
                "then rows) over a model-parallel group, with the exchanges' gradients derived by autodiff.",
                {{"group_size", OptionType::kInt, "0", "ranks per model-parallel group (0: every worker)"},
                 {"layers", OptionType::kString, "", "dense layers to shard, joined by + (fc1+fc2; default: by min_kb)"},
                 {"min_kb", OptionType::kFloat, "256", "shard every dense layer whose weight has at least this "
                                                       "many kilobytes"}},
                [] { return std::make_unique<HybridPartitionPass>(); }};
  info.provides = {kModelPartitionedProperty};
  info.precedes = {kGradientsProperty};
  return info;
}

NEREID_REGISTER_PASS(HybridPartitionInfo());

}  // namespace
}  // namespace nereid
