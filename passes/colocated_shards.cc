#include "passes/colocated_shards.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/process_groups.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"
#include "passes/optimizer_common.h"

namespace nereid {
namespace {

// One parameter of a bucket: its elements, its block (a rank's share,
// padded) and where that block sits in the bucket's per-rank row.
struct Member {
  ShardableParameter p;
  int64_t n = 0;       // P's elements
  int64_t block = 0;   // ceil(n / world)
  int64_t offset = 0;  // in the bucket's row of S = sum of blocks
  size_t ready = 0;    // the gradient's place in the topological order
};

std::vector<std::pair<std::string, AttrValue>> GroupAttrs(int world) {
  return {{"group", StringAttr(kColocatedShardGroup)}, {"group_size", IntAttr(world)}};
}

// This rank's shard of state `state`: the [block] Parameter holding
// elements [rank x block, + block) of state's flattened initial value (zeros
// past its end), a member of the shard group.
absl::StatusOr<Node*> AddShard(Graph& graph, const Node& state, int64_t block, int world) {
  ASSIGN_OR_RETURN(Node * shard, AddStatePiece(graph, state, absl::StrCat(state.name(), "/shard"), 0, block));
  auto& attrs = *shard->mutable_def()->mutable_attr();
  attrs["shard_group"] = StringAttr(kColocatedShardGroup);
  attrs["shard_count"] = IntAttr(world);
  attrs["shard_axis"] = IntAttr(0);
  return shard;
}

// The gradient's flattened value laid out [world, block], padded with zeros.
absl::StatusOr<NodeOut> RankMajorGradient(Graph& graph, const Member& m, int world) {
  const Edge* in = m.p.gradient->input_edge(0);
  const std::string base = absl::StrCat("ps/", m.p.parameter->name(), "/grad");
  ASSIGN_OR_RETURN(Node * flat, AddOpNode(&graph, base + "/flat", "Reshape", {{in->src, in->src_port}},
                                          {{"shape", IntListAttr({m.n})}}));
  NodeOut padded{flat, 0};
  if (world * m.block != m.n) {
    ASSIGN_OR_RETURN(Node * pad, AddOpNode(&graph, base + "/pad", "Pad", {padded},
                                           {{"pads", IntListAttr({0, world * m.block - m.n})}}));
    padded = {pad, 0};
  }
  ASSIGN_OR_RETURN(Node * rows, AddOpNode(&graph, base + "/rows", "Reshape", {padded},
                                          {{"shape", IntListAttr({world, m.block})}}));
  return NodeOut{rows, 0};
}

// The update of m's shard, reading its block of the mean gradient; returns
// the shard's next value of P.
absl::StatusOr<NodeOut> AddShardUpdate(Graph& graph, const Member& m, NodeOut mean, int world) {
  Node* update = m.p.update;
  const std::string base = absl::StrCat("ps/", m.p.parameter->name());
  // Which update output carries each state into the next step.
  absl::flat_hash_map<const Node*, int> next_output;
  for (const Edge* e : update->out_edges()) {
    if (e->dst->op() == "Feedback" && !e->dst->out_edges().empty()) next_output[e->dst->out_edges()[0]->dst] = e->src_port;
  }
  ASSIGN_OR_RETURN(Node * block, AddOpNode(&graph, base + "/shard/grad", "Slice", {mean},
                                           {{"begin", IntAttr(m.offset)}, {"size", IntAttr(m.block)}}));
  NodeDef marker = m.p.gradient->def();
  marker.set_name(base + "/shard/gradient");
  marker.clear_input();
  ASSIGN_OR_RETURN(Node * gradient, graph.AddNode(marker, 1));
  RETURN_IF_ERROR(graph.AddEdge(block, 0, gradient, 0).status());
  NodeDef def = update->def();
  def.set_name(absl::StrCat(update->name(), "/shard"));
  def.clear_input();
  ASSIGN_OR_RETURN(Node * shard_update, graph.AddNode(def, update->num_inputs()));
  for (int i = 0; i < update->num_inputs(); ++i) {
    const Edge* e = update->input_edge(i);
    NodeOut in{e->src, e->src_port};
    if (e->src == m.p.gradient) {
      in = {gradient, 0};
    } else if (e->src->outputs()[static_cast<size_t>(e->src_port)].shape.rank() != 0) {
      // State (P, its optimizer state): this rank's shard of it.
      ASSIGN_OR_RETURN(Node * shard, AddShard(graph, *e->src, m.block, world));
      if (e->src == m.p.parameter) (*gradient->mutable_def()->mutable_attr())["parameter"] = StringAttr(shard->name());
      if (auto q = next_output.find(e->src); q != next_output.end()) {
        RETURN_IF_ERROR(CloseLoop(graph, shard, {shard_update, q->second}));
      }
      in = {shard, 0};
    }
    RETURN_IF_ERROR(graph.AddEdge(in.node, in.port, shard_update, i).status());
  }
  const Node* feedback = m.p.parameter->input_edge(0)->src;
  return NodeOut{shard_update, feedback->input_edge(0)->src_port};
}

// m's columns of the gathered [world, S] values: P's next value, which its
// Feedback carries into the next step in place of the old update's.
// `alone`: the bucket's only member, whose columns are all of them.
absl::Status TakeGathered(Graph& graph, const Member& m, NodeOut rows, int world, bool alone) {
  const std::string base = absl::StrCat("ps/", m.p.parameter->name(), "/gathered");
  NodeOut columns = rows;
  if (!alone) {
    ASSIGN_OR_RETURN(Node * cut, AddOpNode(&graph, base + "/columns", "Slice", {rows},
                                           {{"axis", IntAttr(1)}, {"begin", IntAttr(m.offset)},
                                            {"size", IntAttr(m.block)}}));
    columns = {cut, 0};
  }
  ASSIGN_OR_RETURN(Node * flat, AddOpNode(&graph, base + "/flat", "Reshape", {columns},
                                          {{"shape", IntListAttr({world * m.block})}}));
  NodeOut value{flat, 0};
  if (world * m.block != m.n) {
    ASSIGN_OR_RETURN(Node * unpadded, AddOpNode(&graph, base + "/unpadded", "Slice", {value},
                                                {{"begin", IntAttr(0)}, {"size", IntAttr(m.n)}}));
    value = {unpadded, 0};
  }
  ASSIGN_OR_RETURN(Node * shaped, AddOpNode(&graph, base, "Reshape", {value},
                                            {{"shape", IntListAttr(m.p.parameter->outputs()[0].shape.dims())}}));
  Node* feedback = m.p.parameter->input_edge(0)->src;
  return graph.ReplaceInput(feedback, 0, shaped, 0);
}

// A bucket's two collectives.
struct BucketEnds {
  Node* push = nullptr;  // the reduce-scatter
  Node* pull = nullptr;  // the all-gather
};

// One bucket: its reduce-scatter, the members' shard updates, its
// all-gather, and each member's next value.
absl::StatusOr<BucketEnds> AddBucket(Graph& graph, std::vector<Member>& members, size_t b, int world) {
  const std::string base = absl::StrCat("ps/bucket_", b);
  int64_t row = 0;
  std::vector<NodeOut> parts;
  for (Member& m : members) {
    m.offset = row;
    row += m.block;
    ASSIGN_OR_RETURN(NodeOut rows, RankMajorGradient(graph, m, world));
    parts.push_back(rows);
  }
  NodeOut grid = parts[0];
  if (parts.size() > 1) {
    ASSIGN_OR_RETURN(Node * cat, AddOpNode(&graph, base + "/push/concat", "Concat", parts, {{"axis", IntAttr(1)}}));
    grid = {cat, 0};
  }
  ASSIGN_OR_RETURN(Node * flat, AddOpNode(&graph, base + "/push/flat", "Reshape", {grid},
                                          {{"shape", IntListAttr({world * row})}}));
  std::vector<std::pair<std::string, AttrValue>> averaged = GroupAttrs(world);
  averaged.emplace_back("reduce", StringAttr("avg"));
  ASSIGN_OR_RETURN(Node * mean, AddOpNode(&graph, base + "/push", "GroupReduceScatter", {{flat, 0}}, averaged));
  std::vector<NodeOut> next;
  for (const Member& m : members) {
    ASSIGN_OR_RETURN(NodeOut value, AddShardUpdate(graph, m, {mean, 0}, world));
    next.push_back(value);
  }
  NodeOut joined = next[0];
  if (next.size() > 1) {
    ASSIGN_OR_RETURN(Node * cat, AddOpNode(&graph, base + "/pull/concat", "Concat", next, {{"axis", IntAttr(0)}}));
    joined = {cat, 0};
  }
  ASSIGN_OR_RETURN(Node * pull, AddOpNode(&graph, base + "/pull", "GroupAllGather", {joined}, GroupAttrs(world)));
  ASSIGN_OR_RETURN(Node * rows, AddOpNode(&graph, base + "/pull/rows", "Reshape", {{pull, 0}},
                                          {{"shape", IntListAttr({world, row})}}));
  for (const Member& m : members) RETURN_IF_ERROR(TakeGathered(graph, m, {rows, 0}, world, members.size() == 1));
  return BucketEnds{mean, pull};
}

// The old update, gradient and optimizer state go (their shards replace
// them); P stays, every rank's copy of the gathered value, no longer trained.
absl::Status RemoveWholeUpdate(Graph& graph, const ShardableParameter& p) {
  std::vector<Node*> states;
  for (int i = 0; i < p.update->num_inputs(); ++i) {
    Node* in = p.update->input_edge(i)->src;
    if (in != p.gradient && in != p.parameter && in->op() == "Parameter" && in->outputs()[0].shape.rank() != 0) {
      states.push_back(in);
    }
  }
  graph.RemoveNode(p.update);
  graph.RemoveNode(p.gradient);
  for (Node* state : states) RETURN_IF_ERROR(RemoveState(graph, state));
  (*p.parameter->mutable_def()->mutable_attr())["trainable"] = BoolAttr(false);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ShardOverColocatedServers(Graph& graph, const std::vector<ShardableParameter>& parameters,
                                                      int world, int64_t bucket_bytes) {
  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
  absl::flat_hash_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::vector<Member> members;
  for (const ShardableParameter& p : parameters) {
    Member m;
    m.p = p;
    m.n = p.parameter->outputs()[0].shape.KnownElements();
    m.block = (m.n + world - 1) / world;
    m.ready = position.at(p.gradient->input_edge(0)->src);
    members.push_back(m);
  }
  // In the order the backward pass makes the gradients, so a bucket's
  // collectives start while the earlier layers' gradients are computed.
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.ready < b.ready; });
  std::vector<std::vector<Member>> buckets;
  int64_t filled = 0;
  for (const Member& m : members) {
    if (buckets.empty() || filled + m.n * 4 > bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(m);
    filled += m.n * 4;
  }
  ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(graph));
  groups.push_back(GroupDecl{kColocatedShardGroup, GroupLayout::kBlocks, world, 0});
  DeclareGroups(graph, groups);
  int64_t shard_elements = 0;
  std::vector<BucketEnds> ends;
  for (size_t b = 0; b < buckets.size(); ++b) {
    ASSIGN_OR_RETURN(BucketEnds e, AddBucket(graph, buckets[b], b, world));
    ends.push_back(e);
    for (const Member& m : buckets[b]) shard_elements += m.block;
  }
  // A group's collectives run one at a time in the plan's order: the next
  // bucket's push goes before this one's pull, so the collective thread
  // never waits for an update while gradients are ready to push.
  for (size_t b = 0; b + 1 < ends.size(); ++b) graph.AddControlEdge(ends[b + 1].push, ends[b].pull);
  for (const ShardableParameter& p : parameters) RETURN_IF_ERROR(RemoveWholeUpdate(graph, p));
  return absl::StrCat("exchange=collective: ", parameters.size(), " parameters in ", buckets.size(), " bucket",
                      buckets.size() == 1 ? "" : "s", " of at most ", bucket_bytes / 1024,
                      " KiB, pushed by reduce-scatter and pulled by all-gather over the ", world,
                      " ranks; each rank serves ", shard_elements * 4 / 1024, " KiB of parameters");
}

}  // namespace nereid
