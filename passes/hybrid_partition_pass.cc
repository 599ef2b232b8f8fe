// hybrid_partition: SplitBrain's layer-specific partitioning. Layers whose
// weights are small and compute heavy (convolutions) stay data parallel over
// every rank; the chosen fully connected layers, whose weights hold most of
// the memory, are sharded over a model-parallel group of `group_size` ranks.
//
// Layers are sharded in blocks, as in Megatron-LM (passes/split_block.h):
// column layers (an MLP's first layer; attention's query, key and value)
// cut column-wise, one row layer after them (the MLP's second layer;
// attention's output projection) cut row-wise, so a block costs one
// exchange each way. Two styles of exchange:
//
//   splitbrain (default): each rank feeds its own batch, and the block works
//   on the group's batches together.
//     x (own batch B) -> GroupAllGather -> [G*B, ...] -> columns ... rows
//       -> [G*B, ..., out], a partial sum -> GroupReduceScatter -> [B, ..., out]
//   megatron (tensor parallel): the group's ranks read the same batch.
//     x -> GroupIdentity -> columns ... rows -> GroupAllReduce -> the sum
//
// The collectives' gradients are their conjugates
// (ops/group_collective_ops.cc), so autodiff derives the backward
// communication. In splitbrain style a shard's gradient sums the group's
// examples, so it is scaled by 1 / group_size; in megatron style it is the
// whole batch's already. Shards are averaged over the ranks holding the same
// one (`replicas`) when the group is smaller than the world: the arithmetic
// is data parallelism's, up to rounding. Megatron style makes the model
// groups strided (ranks equal modulo the number of data replicas), so that
// the data shards (rank modulo replicas) give a group one batch.
//
// Runs before autodiff. The world comes from the pass context's target (the
// world BuildPlan plans for: `--workers N`); the pass records its groups in
// the plan's records (groups, model_parallel, and data_replicas in megatron
// style).

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
#include "passes/split_block.h"

namespace nereid {
namespace {

constexpr char kModelGroup[] = "model";
constexpr char kReplicaGroup[] = "replicas";

int64_t WeightElements(const Node& dense) { return WeightOf(dense)->outputs()[0].shape.KnownElements(); }

// How the group exchanges a block's input and output.
struct Style {
  bool shared_batch;  // megatron: the group reads one batch
  const char* before;  // the op before the columns
  const char* before_suffix;
  const char* after;  // the op after the rows
  const char* after_suffix;
};
constexpr Style kSplitBrain{false, "GroupAllGather", "/gather", "GroupReduceScatter", "/reduce_scatter"};
constexpr Style kMegatron{true, "GroupIdentity", "/identity", "GroupAllReduce", "/allreduce"};

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
    const std::string& style_name = o.GetString("style");
    if (style_name != "splitbrain" && style_name != "megatron") {
      return absl::InvalidArgumentError(absl::StrCat("hybrid_partition: style '", style_name,
                                                     "' is not one of splitbrain, megatron"));
    }
    const Style& style = style_name == "megatron" ? kMegatron : kSplitBrain;
    for (Node* n : graph.nodes()) {
      if (n->op() == "Gradient") return absl::FailedPreconditionError("hybrid_partition: runs before autodiff");
      if (n->op() == "GroupAllGather" || n->op() == "GroupIdentity") {
        return absl::FailedPreconditionError("hybrid_partition: applied twice");
      }
    }
    ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
    ASSIGN_OR_RETURN(std::vector<Node*> chosen, ChooseLayers(graph, order, o));
    if (group == 1) {
      log->notes.push_back("group_size 1: nothing to shard, every layer stays data parallel");
      return absl::OkStatus();
    }
    std::vector<SplitBlock> blocks = FindBlocks(chosen, order, log);
    const bool shard_rest = o.GetBool("shard_rest");
    if (blocks.empty() && !shard_rest) {
      log->notes.push_back("no block of dense layers to shard: every layer stays data parallel");
      return absl::OkStatus();
    }
    const bool replicated = group < world;
    int64_t sharded = 0, total = 0;
    for (Node* n : graph.nodes()) {
      if (n->op() == "Parameter" && n->outputs()[0].shape.IsFullyDefined()) total += n->outputs()[0].shape.KnownElements();
    }
    const float scale = style.shared_batch ? 1.0f : 1.0f / static_cast<float>(group);
    for (const SplitBlock& b : blocks) {
      for (Node* c : b.columns) RETURN_IF_ERROR(Shard(graph, *WeightOf(*c), 1, group, scale, replicated, sharded));
      for (auto [p, axis] : b.cut_parameters) RETURN_IF_ERROR(Shard(graph, *p, axis, group, scale, replicated, sharded));
      RETURN_IF_ERROR(Shard(graph, *WeightOf(*b.rows), 0, group, scale, replicated, sharded));
      RETURN_IF_ERROR(CutReshapes(graph, b, group));
      ASSIGN_OR_RETURN(Node * after, Exchange(graph, b, group, style));
      RETURN_IF_ERROR(ShardRowBias(graph, *after, b, group, replicated, sharded));
      log->notes.push_back(absl::StrCat(ColumnNames(b), " split by columns and ", b.rows->name(), " by rows over ",
                                        group, " ranks"));
    }
    if (shard_rest) RETURN_IF_ERROR(ShardTheRest(graph, group, replicated, sharded, log));
    RecordGroups(graph, world, group, style);
    log->notes.push_back(absl::StrCat("each rank holds ", total - sharded + sharded / group, " of the model's ", total,
                                      " parameters (", sharded, " sharded ", group, " ways)"));
    return absl::OkStatus();
  }

 private:
  // The dense layers to shard: those named in `layers` (a MatMul node, or a
  // layer prefix whose "<prefix>/matmul" is one; joined by +), or every one whose weight
  // is at least min_kb.
  absl::StatusOr<std::vector<Node*>> ChooseLayers(Graph& graph, const std::vector<Node*>& order,
                                                  const PassOptions& o) {
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
      if (n == nullptr || !IsDenseLayer(*n)) n = graph.FindNode(absl::StrCat(name, "/matmul"));
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

  // Blocks in topological order, each chosen layer in at most one; a chosen
  // layer in none stays data parallel, with the reason in the log.
  std::vector<SplitBlock> FindBlocks(const std::vector<Node*>& chosen, const std::vector<Node*>& order, PassLog* log) {
    absl::flat_hash_set<const Node*> free(chosen.begin(), chosen.end());
    absl::flat_hash_map<const Node*, std::string> why;
    std::vector<SplitBlock> blocks;
    for (Node* rows : chosen) {
      if (!free.contains(rows)) continue;
      absl::StatusOr<SplitBlock> block = FindSplitBlock(rows, free, order);
      if (!block.ok()) {
        why[rows] = std::string(block.status().message());
        continue;
      }
      for (Node* c : block->columns) free.erase(c);
      free.erase(rows);
      blocks.push_back(*std::move(block));
    }
    for (Node* n : chosen) {
      if (free.contains(n)) {
        log->notes.push_back(absl::StrCat(n->name(), " stays data parallel: it is in no block of layers to cut (",
                                          why[n], ")"));
      }
    }
    return blocks;
  }

  static std::string ColumnNames(const SplitBlock& b) {
    std::vector<std::string> names;
    for (const Node* c : b.columns) names.push_back(c->name());
    return absl::StrJoin(names, ", ");
  }

  // Makes `param` a shard: block (group rank) of `group` along `axis`.
  absl::Status Shard(Graph& graph, Node& param, int axis, int64_t group, float gradient_scale, bool replicated,
                     int64_t& sharded) {
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
    attrs["gradient_scale"] = FloatAttr(gradient_scale);
    if (replicated) attrs["replica_group"] = StringAttr(kReplicaGroup);
    return absl::OkStatus();
  }

  // The block's exchanges: one before its columns (they share it), one after
  // its rows, which it returns.
  absl::StatusOr<Node*> Exchange(Graph& graph, const SplitBlock& b, int64_t group, const Style& style) {
    std::vector<std::pair<std::string, AttrValue>> attrs = {{"group", StringAttr(kModelGroup)},
                                                            {"group_size", IntAttr(group)}};
    const Edge* in = b.columns.front()->input_edge(0);
    ASSIGN_OR_RETURN(Node * before, AddOpNode(&graph, absl::StrCat(b.columns.front()->name(), style.before_suffix),
                                              style.before, {NodeOut{in->src, in->src_port}}, attrs));
    for (Node* c : b.columns) RETURN_IF_ERROR(graph.ReplaceInput(c, 0, before, 0));
    std::vector<std::pair<Node*, int>> consumers;
    for (const Edge* e : b.rows->out_edges()) {
      if (!e->IsControl() && e->src_port == 0) consumers.emplace_back(e->dst, e->dst_port);
    }
    ASSIGN_OR_RETURN(Node * after, AddOpNode(&graph, absl::StrCat(b.rows->name(), style.after_suffix), style.after,
                                             {NodeOut{b.rows, 0}}, attrs));
    for (auto [dst, port] : consumers) RETURN_IF_ERROR(graph.ReplaceInput(dst, port, after, 0));
    return after;
  }

  // The row layer's bias, added after the exchange, is held in shards too and
  // gathered where it is added (its gradient, the conjugate reduce-scatter,
  // sums the members' gradients: 1/G of that in either style, as each member
  // saw the group's whole batch or its own). Megatron-LM keeps it whole; the
  // gather is G-1 blocks of out/G floats, so every parameter of the block is
  // held 1/G per rank.
  absl::Status ShardRowBias(Graph& graph, const Node& after, const SplitBlock& b, int64_t group, bool replicated,
                            int64_t& sharded) {
    const int64_t width = b.rows->outputs()[0].shape.dims().back();
    for (const Edge* e : after.out_edges()) {
      Node* add = e->dst;
      if (e->IsControl() || (add->op() != "Add" && add->op() != "BiasAdd") || add->num_inputs() != 2) continue;
      Node* bias = add->input_edge(1 - e->dst_port)->src;
      const TensorShape& shape = bias->outputs()[0].shape;
      if (bias->op() != "Parameter" || shape.dims().size() != 1 || shape.dims()[0] != width || width % group != 0) continue;
      return GatherWhereUsed(graph, *bias, group, replicated, sharded);
    }
    return absl::OkStatus();
  }

  // Makes `param` a shard along dimension 0 that every user reads gathered
  // (GroupAllGather; its gradient, the conjugate reduce-scatter, sums the
  // members' gradients, so the shard's is scaled by 1/G).
  absl::Status GatherWhereUsed(Graph& graph, Node& param, int64_t group, bool replicated, int64_t& sharded) {
    std::vector<std::pair<Node*, int>> consumers;
    for (const Edge* e : param.out_edges()) {
      if (!e->IsControl()) consumers.emplace_back(e->dst, e->dst_port);
    }
    RETURN_IF_ERROR(Shard(graph, param, 0, group, 1.0f / static_cast<float>(group), replicated, sharded));
    ASSIGN_OR_RETURN(Node * gathered, AddOpNode(&graph, absl::StrCat(param.name(), "/gather"), "GroupAllGather",
                                                {NodeOut{&param, 0}},
                                                {{"group", StringAttr(kModelGroup)}, {"group_size", IntAttr(group)}}));
    for (auto [dst, port] : consumers) RETURN_IF_ERROR(graph.ReplaceInput(dst, port, gathered, 0));
    return absl::OkStatus();
  }

  // shard_rest: every parameter the blocks left whole (convolutions, layers
  // in no block, normalisations) is held in shards along dimension 0 too and
  // gathered where it is used, as FSDP / ZeRO-3 do: a rank keeps 1/G of its
  // value and optimizer state, and the gathered copy lives only while the
  // step uses it. Its gradient, the gather's conjugate reduce-scatter, sums
  // the members' gradients: 1/G of that is data parallelism's average in
  // either style, as for the row biases. A parameter whose dimension 0 does
  // not divide into G stays whole, named in the log.
  absl::Status ShardTheRest(Graph& graph, int64_t group, bool replicated, int64_t& sharded, PassLog* log) {
    std::vector<Node*> whole;
    for (Node* n : graph.nodes()) {
      if (n->op() != "Parameter" || n->def().attr().contains("shard_group")) continue;
      const TensorShape& shape = n->outputs()[0].shape;
      if (!shape.IsFullyDefined() || shape.dims().empty()) continue;
      whole.push_back(n);
    }
    std::vector<std::string> kept;
    for (Node* p : whole) {
      if (p->outputs()[0].shape.dims()[0] % group != 0) {
        kept.push_back(p->name());
        continue;
      }
      RETURN_IF_ERROR(GatherWhereUsed(graph, *p, group, replicated, sharded));
    }
    if (!kept.empty()) {
      log->notes.push_back(absl::StrCat("shard_rest: left whole, as dimension 0 does not divide into ", group, ": ",
                                        absl::StrJoin(kept, ", ")));
    }
    return absl::OkStatus();
  }

  // The groups and what they mean for the data: in megatron style a model
  // group is every `replicas`-th rank (they read one shard of the data), and
  // the holders of one shard are consecutive.
  static void RecordGroups(Graph& graph, int64_t world, int64_t group, const Style& style) {
    PlanRecords& records = *graph.mutable_header()->mutable_records();
    const int replicas = static_cast<int>(world / group);
    std::vector<GroupDecl> groups;
    if (style.shared_batch) {
      groups.push_back({kModelGroup, GroupLayout::kStrided, replicas});
      if (replicas > 1) groups.push_back({kReplicaGroup, GroupLayout::kBlocks, replicas});
      records.set_data_replicas(replicas);
    } else {
      groups.push_back({kModelGroup, GroupLayout::kBlocks, static_cast<int>(group)});
      if (replicas > 1) groups.push_back({kReplicaGroup, GroupLayout::kStrided, static_cast<int>(group)});
    }
    DeclareGroups(graph, groups);
    records.set_model_parallel(static_cast<int32_t>(group));
  }
};

PassInfo HybridPartitionInfo() {
  PassInfo info{"hybrid_partition",
                "SplitBrain and Megatron-LM: convolutions stay data parallel, blocks of large dense layers (an MLP's "
                "pair, attention's projections) are sharded (columns, then rows) over a model-parallel group, with "
                "the exchanges' gradients derived by autodiff.",
                {{"group_size", OptionType::kInt, "0", "ranks per model-parallel group (0: every worker)"},
                 {"layers", OptionType::kString, "", "dense layers to shard, joined by + (fc1+fc2; default: by min_kb)"},
                 {"min_kb", OptionType::kFloat, "256", "shard every dense layer whose weight has at least this "
                                                       "many kilobytes"},
                 {"shard_rest", OptionType::kBool, "false",
                  "hold every other parameter (convolutions, normalisations) in shards too, gathered where used "
                  "(FSDP / ZeRO-3): 1/group_size of their value and optimizer state per rank"},
                 {"style", OptionType::kString, "splitbrain",
                  "splitbrain: each rank its own batch, gathered into the block; megatron (tensor parallel): the "
                  "group reads one batch, and each block ends in one allreduce"}},
                [] { return std::make_unique<HybridPartitionPass>(); }};
  info.provides = {kModelPartitionedProperty};
  info.precedes = {kGradientsProperty};
  return info;
}

NEREID_REGISTER_PASS(HybridPartitionInfo());

}  // namespace
}  // namespace nereid
