// hybrid_partition's blocks on the byte transformer, as plans: attention's
// query, key and value cut by columns (heads) and its output projection by
// rows, the MLP's two layers likewise, one exchange before and after each
// block, and the records that make a model group read one batch (megatron
// style). The arithmetic is checked end to end in
// tests/distributed/hybrid_partition_test.cc.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/process_groups.h"
#include "gtest/gtest.h"
#include "plan/build_plan.h"

namespace nereid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTransformer[] = "models/char_transformer.pbtxt";

absl::StatusOr<BuiltPlan> Plan(const std::string& model, const std::string& passes, int workers) {
  PlanRequest request;
  request.model = model;
  request.target.workers = workers;
  request.target.servers = 0;
  request.dataset = "synthetic";
  request.check_trainable = false;
  request.whole_only = true;
  auto pipeline = PipelineFor(passes, request.target);
  if (!pipeline.ok()) return pipeline.status();
  request.pipeline = *std::move(pipeline);
  return BuildPlan(request);
}

std::vector<int64_t> Dims(const Graph& g, const std::string& node) {
  const Node* n = g.FindNode(node);
  return n == nullptr ? std::vector<int64_t>{} : n->outputs()[0].shape.dims();
}

std::vector<int64_t> ReshapeTarget(const Graph& g, const std::string& node) {
  const auto& list = g.FindNode(node)->def().attr().at("shape").list().i();
  return {list.begin(), list.end()};
}

int Count(const Graph& g, const std::string& op) {
  int count = 0;
  for (const Node* n : g.nodes()) count += n->op() == op;
  return count;
}

std::string Notes(const BuiltPlan& plan) {
  std::string all;
  for (const PassReport& r : plan.reports) {
    for (const std::string& note : r.notes) all += note + "\n";
  }
  return all;
}

TEST(TensorParallelPlanTest, AttentionAndMlpBlocksAreCutByHeadsAndColumns) {
  auto plan = Plan(kTransformer, "hybrid_partition(style=megatron,group_size=2),autodiff,adam(lr=0.001)", 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Graph& g = *plan->whole;
  // Per block: query, key and value by columns (two of the four heads each), the output projection by rows.
  EXPECT_THAT(Dims(g, "block0/attention/query/weight"), ElementsAre(256, 128));
  EXPECT_THAT(Dims(g, "block0/attention/key/bias"), ElementsAre(128));
  EXPECT_THAT(Dims(g, "block0/attention/value/weight"), ElementsAre(256, 128));
  EXPECT_THAT(Dims(g, "block0/attention/out/weight"), ElementsAre(128, 256));
  EXPECT_THAT(Dims(g, "block0/attention/out/bias"), ElementsAre(128));  // in shards, gathered after the sum
  const Node* bias_add = g.FindNode("block0/attention/out/matmul/allreduce")->out_edges().front()->dst;
  ASSERT_EQ(bias_add->num_inputs(), 2);
  EXPECT_EQ(bias_add->input_edge(1)->src->name(), "block0/attention/out/bias/gather");
  EXPECT_THAT(ReshapeTarget(g, "block0/attention/query/heads"), ElementsAre(-1, 128, 2, 64));
  EXPECT_THAT(ReshapeTarget(g, "block0/attention/merged"), ElementsAre(-1, 128, 128));
  EXPECT_THAT(Dims(g, "block3/mlp/up/weight"), ElementsAre(256, 512));
  EXPECT_THAT(Dims(g, "block3/mlp/up/bias"), ElementsAre(512));
  EXPECT_THAT(Dims(g, "block3/mlp/down/weight"), ElementsAre(512, 256));
  EXPECT_THAT(Dims(g, "block3/mlp/down/bias"), ElementsAre(128));
  // LayerNorms and embeddings stay whole.
  EXPECT_THAT(Dims(g, "block0/ln1/scale"), ElementsAre(256));
  EXPECT_THAT(Dims(g, "embedding/tokens"), ElementsAre(256, 256));
  // One identity before and one allreduce after each of the 8 blocks; the
  // identities' gradients are the backward allreduces. Each block's row bias
  // is gathered, and its gradient reduce-scattered.
  EXPECT_EQ(Count(g, "GroupIdentity"), 8);
  EXPECT_EQ(Count(g, "GroupAllReduce"), 16);
  EXPECT_EQ(Count(g, "GroupAllGather"), 8);
  EXPECT_EQ(Count(g, "GroupReduceScatter"), 8);
  const Node* identity = g.FindNode("block0/attention/query/matmul/identity");
  ASSERT_NE(identity, nullptr);
  for (const char* layer : {"query", "key", "value"}) {  // share one exchange
    EXPECT_EQ(g.FindNode(absl::StrCat("block0/attention/", layer, "/matmul"))->input_edge(0)->src, identity) << layer;
  }
  EXPECT_EQ(g.FindNode("block0/attention/out/matmul/allreduce")->op(), "GroupAllReduce");
  EXPECT_THAT(Notes(*plan), Not(HasSubstr("stays data parallel")));
  const PlanRecords& r = g.header().records();
  EXPECT_EQ(r.model_parallel(), 2);
  EXPECT_EQ(r.data_replicas(), 1);
}

// 2 data x 2 tensor: the model groups are ranks {0, 2} and {1, 3}, which
// read data shards 0 and 1; the holders of a shard, {0, 1} and {2, 3},
// average its gradient.
TEST(TensorParallelPlanTest, TwoByTwoGroupsReadOneShardPerModelGroup) {
  auto plan = Plan(kTransformer, "hybrid_partition(style=megatron,group_size=2),autodiff,adam(lr=0.001)", 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Graph& g = *plan->whole;
  EXPECT_EQ(g.header().records().data_replicas(), 2);
  auto groups = DeclaredGroups(g);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(GroupDeclsText(*groups), "model=strided:2;replicas=blocks:2");
  auto model0 = MembershipOf((*groups)[0], 2, 4);
  ASSERT_TRUE(model0.ok());
  EXPECT_THAT(model0->members, ElementsAre(0, 2));
  EXPECT_EQ(NodeAttrString(*g.FindNode("block1/mlp/down/weight"), "replica_group"), "replicas");
  EXPECT_GT(Count(g, "AllReduce"), 0) << "the replicated weights are still averaged";
}

// Four ranks cut the four heads one each.
TEST(TensorParallelPlanTest, FourWaysGiveOneHeadPerRank) {
  auto plan = Plan(kTransformer, "hybrid_partition(style=megatron),autodiff,sgd(lr=0.01)", 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(ReshapeTarget(*plan->whole, "block2/attention/value/heads"), ElementsAre(-1, 128, 1, 64));
  EXPECT_THAT(Dims(*plan->whole, "block2/mlp/up/weight"), ElementsAre(256, 256));
  // Every parameter of a transformer layer but its LayerNorms is held in
  // quarters: what a rank holds is exactly a quarter plus the LayerNorms.
  auto whole = Plan(kTransformer, "autodiff,sgd(lr=0.01)", 4);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto layer_parameters = [](const Graph& g, bool layer_norms) {
    int64_t count = 0;
    for (const Node* n : g.nodes()) {
      if (n->op() == "Parameter" && absl::StartsWith(n->name(), "block2/") &&
          absl::StrContains(n->name(), "/ln") == layer_norms) {
        count += n->outputs()[0].shape.KnownElements();
      }
    }
    return count;
  };
  const int64_t norms = layer_parameters(*whole->whole, true);
  EXPECT_GT(norms, 0);
  EXPECT_EQ(layer_parameters(*plan->whole, true), norms);
  EXPECT_EQ(layer_parameters(*plan->whole, false) * 4, layer_parameters(*whole->whole, false));
}

// shard_rest holds every other parameter in shards too (FSDP): on vgg11 at
// 8 ranks a rank holds exactly an eighth of the model but fc3's bias (10
// values, which do not divide into 8), and every layer outside the block
// (fc1, fc2) reads its shard gathered.
TEST(TensorParallelPlanTest, ShardRestHoldsEveryParameterInShards) {
  auto parameters = [](const Graph& g) {
    int64_t count = 0;
    for (const Node* n : g.nodes()) count += n->op() == "Parameter" ? n->outputs()[0].shape.KnownElements() : 0;
    return count;
  };
  auto whole = Plan("models/vgg11_cifar.pbtxt", "autodiff,sgd(lr=0.01)", 8);
  auto sharded = Plan("models/vgg11_cifar.pbtxt", "hybrid_partition(shard_rest=true),autodiff,sgd(lr=0.01)", 8);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  const Graph& g = *sharded->whole;
  EXPECT_EQ((parameters(*whole->whole) - 10) / 8 + 10, parameters(g));
  EXPECT_THAT(Dims(g, "conv1/filter"), ElementsAre(8, 3, 3, 3));
  EXPECT_EQ(g.FindNode("conv1/filter/gather")->op(), "GroupAllGather");
  EXPECT_EQ(g.FindNode("fc3/bias")->def().attr().count("shard_group"), 0u);
  EXPECT_THAT(Notes(*sharded), HasSubstr("left whole, as dimension 0 does not divide into 8: fc3/bias"));
  for (const Node* n : g.nodes()) {
    // fc1 and fc2 are the block's own shards, which their layers read as they are.
    if (n->op() != "Parameter" || n->name() == "fc3/bias" || absl::StartsWith(n->name(), "fc1/") ||
        absl::StartsWith(n->name(), "fc2/")) {
      continue;
    }
    for (const Edge* e : n->out_edges()) {
      if (!e->IsControl() && !absl::StartsWith(e->dst->op(), "Apply")) {
        EXPECT_EQ(e->dst->op(), "GroupAllGather") << n->name() << " read whole by " << e->dst->name();
      }
    }
  }
}

// SplitBrain's style cuts the same blocks and gathers the group's batches.
TEST(TensorParallelPlanTest, SplitBrainStyleGathersIntoTheSameBlocks) {
  auto plan = Plan(kTransformer, "hybrid_partition(group_size=2),autodiff,sgd(lr=0.01)", 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Graph& g = *plan->whole;
  EXPECT_EQ(Count(g, "GroupIdentity"), 0);
  EXPECT_EQ(g.FindNode("block0/attention/query/matmul/gather")->op(), "GroupAllGather");
  EXPECT_EQ(g.FindNode("block0/mlp/down/matmul/reduce_scatter")->op(), "GroupReduceScatter");
  EXPECT_EQ(g.header().records().data_replicas(), 0) << "each rank reads its own batch";
}

TEST(TensorParallelPlanTest, CutsThatDoNotDivideAreRefusedNamingWhere) {
  // 4 heads do not divide into 8 ranks: the heads' reshape says so.
  auto plan = Plan(kTransformer, "hybrid_partition(style=megatron),autodiff,sgd(lr=0.01)", 8);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("attention/query/heads"));
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("does not divide into 8 shards"));
  auto bad = Plan(kTransformer, "hybrid_partition(style=tensor),autodiff,sgd(lr=0.01)", 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("style 'tensor' is not one of splitbrain, megatron"));
}

// A layer whose block would be cut across the axis an op normalises or
// contracts stays whole, and the plan says why.
TEST(TensorParallelPlanTest, LayersInNoBlockStayWholeWithTheReason) {
  auto plan = Plan(kTransformer,
                   "hybrid_partition(style=megatron,group_size=2,layers=block0/attention/query+block0/ln2),"
                   "autodiff,sgd(lr=0.01)",
                   2);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("'block0/ln2' is not a dense layer"));
  auto partial = Plan(kTransformer,
                      "hybrid_partition(style=megatron,group_size=2,layers=block0/attention/query+block0/attention/out),"
                      "autodiff,sgd(lr=0.01)",
                      2);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_THAT(Notes(*partial), HasSubstr("block0/attention/out/matmul stays data parallel"));
  EXPECT_THAT(Notes(*partial), HasSubstr("the layer before it, block0/attention/"));
  EXPECT_EQ(Count(*partial->whole, "GroupIdentity"), 0);
}

}  // namespace
}  // namespace nereid
