// The pass manager, autodiff and the optimizer passes on real models.

#include <algorithm>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "gtest/gtest.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "schedulers/executor.h"
#include "tests/training/plan_util.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Graph>> Planned(const std::string& model, const std::string& passes) {
  return testing::PlanModel(model, passes);
}

TEST(PipelineTest, ParsesPassesAndOptions) {
  auto p = ParsePipeline("autodiff, sgd(lr=0.05, momentum=0.9, weight_decay=5e-4)");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[1].pass->name, "sgd");
  EXPECT_DOUBLE_EQ((*p)[1].options.GetFloat("lr"), 0.05);
  EXPECT_DOUBLE_EQ((*p)[1].options.GetFloat("weight_decay"), 5e-4);
  EXPECT_FALSE((*p)[1].options.GetBool("nesterov"));  // the default
}

TEST(PipelineTest, BadPipelinesSayWhatExists) {
  EXPECT_THAT(std::string(ParsePipeline("autodif").status().message()),
              HasSubstr("unknown pass 'autodif'; passes are: adam, autodiff, clip, coded, compress, data_parallel, gossip, hybrid_partition, lookahead, parameter_server, pipeline, place, power_gossip, sgd, stage_split"));
  EXPECT_THAT(std::string(ParsePipeline("sgd(rate=1)").status().message()),
              HasSubstr("pass 'sgd' has no option 'rate'; its options are lr (a number)"));
  EXPECT_THAT(std::string(ParsePipeline("sgd(lr=fast)").status().message()), HasSubstr("lr=fast must be a number"));
  EXPECT_THAT(std::string(ParsePipeline("sgd(lr=0.1").status().message()), HasSubstr("unclosed '('"));
  EXPECT_THAT(std::string(ParsePipeline("sgd(lr)").status().message()), HasSubstr("is not key=value"));
}

TEST(PipelineTest, ErrorsNameThePassTheyFollow) {
  auto graph = Planned("mlp_fashion", "sgd");
  EXPECT_THAT(std::string(graph.status().message()),
              HasSubstr("failed after sgd: the graph has no gradients: run the autodiff pass before an optimizer"));
  graph = Planned("mlp_fashion", "autodiff,autodiff");
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr("failed after autodiff"));
}

// Pass order comes from what each pass declares it needs, provides and
// precedes, checked on the parsed pipeline before any pass runs.
TEST(PipelineOrderTest, DeclaredOrderIsCheckedBeforeAnythingRuns) {
  EXPECT_TRUE(ParsePipeline("autodiff,data_parallel,compress(method=fp16),pipeline(width=2),sgd").ok());
  // needs: compress needs gradient communication, which data_parallel provides later.
  EXPECT_THAT(std::string(ParsePipeline("autodiff,compress(method=fp16),data_parallel").status().message()),
              HasSubstr("compress must come after data_parallel in the pass list"));
  // precedes: data_parallel must come before what pipelines the graph.
  EXPECT_THAT(std::string(ParsePipeline("autodiff,pipeline,data_parallel").status().message()),
              HasSubstr("data_parallel must come before pipeline in the pass list (pipeline provides pipelined)"));
  // A need that no stage provides is left to the pass (the graph may have it).
  EXPECT_TRUE(ParsePipeline("data_parallel").ok());
}

TEST(PipelineOrderTest, APipelinedGraphRefusesWhatMustPrecedePipelining) {
  auto graph = Planned("mlp_fashion", "autodiff,pipeline(width=2),sgd");
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto more = ParsePipeline("data_parallel");
  ASSERT_TRUE(more.ok());
  EXPECT_THAT(std::string(RunPipeline(**graph, *more).status().message()),
              HasSubstr("data_parallel must come before what made the graph so: it is already pipelined"));
}

TEST(PipelineOrderTest, AnOptimizedGraphRefusesClip) {
  auto graph = Planned("mlp_fashion", "autodiff,sgd");
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto more = ParsePipeline("clip(max_norm=1)");
  ASSERT_TRUE(more.ok());
  EXPECT_THAT(std::string(RunPipeline(**graph, *more).status().message()),
              HasSubstr("clip must come before what made the graph so: it has an optimizer"));
}

TEST(PipelineOrderTest, SeveralWorkersImplyDataParallelRightAfterAutodiff) {
  auto p = ParsePipeline("autodiff,compress(method=fp16),pipeline(width=2),sgd(lr=0.1)");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(AddImpliedPasses(*p, PlanTarget{2}).ok());
  EXPECT_EQ(PipelineText(*p), "autodiff,data_parallel,compress(method=fp16),pipeline(width=2),sgd(lr=0.1)");
  EXPECT_DOUBLE_EQ((*p)[1].options.GetFloat("bucket_kb"), 4096);  // the implied pass gets its defaults

  // One worker implies nothing; a pipeline that communicates already, or that
  // has no autodiff to follow (a graph planned already), gets nothing added.
  for (const auto& [passes, workers] : std::vector<std::pair<std::string, int>>{
           {"autodiff,sgd", 1}, {"autodiff,data_parallel(bucket_kb=64),sgd", 4}, {"sgd", 4}}) {
    auto q = ParsePipeline(passes);
    ASSERT_TRUE(q.ok()) << q.status();
    ASSERT_TRUE(AddImpliedPasses(*q, PlanTarget{workers}).ok());
    EXPECT_EQ(PipelineText(*q), passes);
  }
}

// clip(max_norm): the gradient the optimizer reads is scaled to the norm,
// and only when it is above it. loss = sum(w * w): the gradient is 2w.
TEST(ClipTest, ScalesTheGradientsToTheGlobalNorm) {
  using testing::Attr;
  using testing::OpNode;
  using testing::ShapeValue;
  const std::string text = std::string("attr { key: \"loss\" value { s: \"loss\" } }\n") +
                           OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4}))) +
                           OpNode("v", "Parameter", {}, Attr("shape", ShapeValue({1}))) +
                           OpNode("ww", "Mul", {"w", "w"}) + OpNode("vv", "Mul", {"v", "v"}) +
                           OpNode("sw", "ReduceSum", {"ww"}, Attr("keepdims", "b: false")) +
                           OpNode("sv", "ReduceSum", {"vv"}, Attr("keepdims", "b: false")) +
                           OpNode("loss", "Add", {"sw", "sv"});
  for (double max_norm : {1.0, 100.0}) {
    auto graph = testing::LoadText(text);
    ASSERT_TRUE(graph.ok()) << graph.status();
    auto pipeline = ParsePipeline(absl::StrCat("autodiff,clip(max_norm=", max_norm, ")"));
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    ASSERT_TRUE(RunPipeline(**graph, *pipeline).ok());
    auto executor = Executor::Create(graph->get(), ExecutorOptions{});
    ASSERT_TRUE(executor.ok()) << executor.status();
    ASSERT_TRUE((*executor)->SetState("w", *Tensor::FromVector({4}, {1.5f, 0, -2, 0})).ok());
    ASSERT_TRUE((*executor)->SetState("v", *Tensor::FromVector({1}, {0})).ok());
    StepInfo step;
    auto out = (*executor)->Evaluate(step, {}, {"w/grad", "v/grad", "clip/factor"});
    ASSERT_TRUE(out.ok()) << out.status();
    const float* dw = (*out)[0].data<float>();
    // The gradient (3, 0, -4, 0; 0) has norm 5.
    const float scale = max_norm < 5 ? 1.0f / 5.0f : 1.0f;
    EXPECT_NEAR((*out)[2].data<float>()[0], scale, 1e-6) << max_norm;
    EXPECT_NEAR(dw[0], 3 * scale, 1e-6) << max_norm;
    EXPECT_NEAR(dw[2], -4 * scale, 1e-6) << max_norm;
    EXPECT_EQ((*out)[1].data<float>()[0], 0.0f);
  }
}

TEST(ClipTest, ComesAfterTheAllreduceAndBeforeTheOptimizer) {
  EXPECT_TRUE(ParsePipeline("autodiff,data_parallel,clip(max_norm=1),adam").ok());
  EXPECT_THAT(std::string(ParsePipeline("autodiff,clip,data_parallel,sgd").status().message()),
              HasSubstr("data_parallel must come before clip"));
  EXPECT_THAT(std::string(ParsePipeline("autodiff,sgd,clip").status().message()), HasSubstr("clip must come before sgd"));
  EXPECT_THAT(std::string(Planned("mlp_fashion", "autodiff,clip(max_norm=0),sgd").status().message()),
              HasSubstr("max_norm must be > 0"));
}

TEST(AutodiffTest, NamesGradientsAfterTheirNodes) {
  auto graph = Planned("lenet_fashion", "autodiff");
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (const char* name : {"conv1/filter/grad", "conv1/conv/grad/filter", "fc3/matmul/grad/b", "loss/grad/seed"}) {
    EXPECT_NE((*graph)->FindNode(name), nullptr) << name;
  }
  EXPECT_EQ((*graph)->FindNode("conv1/filter/grad")->op(), "Gradient");
  // No gradient flows into the images: the first layer's input gradient is pruned.
  EXPECT_EQ((*graph)->FindNode("conv1/conv/grad/x"), nullptr);
}

TEST(AutodiffTest, SumsGradientsWhereAValueFansOut) {
  auto graph = Planned("resnet20_cifar", "autodiff");
  ASSERT_TRUE(graph.ok()) << graph.status();
  int sums = 0;
  for (Node* n : (*graph)->nodes()) sums += n->op() == "AddN";
  EXPECT_GT(sums, 0);  // residual connections fan out
}

TEST(SgdTest, ClosesTheLoopThroughFeedback) {
  auto graph = Planned("mlp_fashion", "autodiff,sgd(lr=0.1,momentum=0.9)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Node* w = (*graph)->FindNode("fc1/weight");
  ASSERT_EQ(w->num_inputs(), 1);
  EXPECT_EQ(w->input_edge(0)->src->name(), "fc1/weight/next");
  EXPECT_EQ(w->input_edge(0)->src->op(), "Feedback");
  EXPECT_EQ((*graph)->FindNode("fc1/weight/sgd")->op(), "ApplySgd");
  EXPECT_EQ((*graph)->FindNode("fc1/weight/momentum/next")->op(), "Feedback");
  ASSERT_EQ((*graph)->header().loop_size(), 1);
  EXPECT_EQ((*graph)->header().loop(0).max_in_flight(), 1);
  // A plan survives a write and a reload.
  std::string text = GraphDefToText(ExportGraph(**graph));
  auto file = ParseGraphText(text, "plan.pbtxt");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(LoadModel(*file).ok());
}

// Overlap SGP: pushes go through a delay line of per-rank state, the loop
// keeps overlap+1 steps in flight, and every reader of a parameter but its
// update reads the de-biased x / w.
TEST(GossipTest, OverlapDelaysPushesAndReadsTheDebiasedModel) {
  auto graph = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->mutable_header()->mutable_records()->set_workers(4);
  auto pipeline = ParsePipeline("autodiff,sgd(lr=0.1,momentum=0.9),gossip(topology=ring,overlap=2)");
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunPipeline(**graph, *pipeline).ok());
  const Graph& g = **graph;
  EXPECT_EQ(g.header().loop(0).max_in_flight(), 3);
  for (const char* name : {"fc1/weight/gossip/in_flight_1", "fc1/weight/gossip/in_flight_2",
                           "gossip/weight/gossip/in_flight_2"}) {
    const Node* state = g.FindNode(name);
    ASSERT_NE(state, nullptr) << name;
    EXPECT_EQ(state->op(), "Parameter");
    EXPECT_TRUE(NodeAttrBool(*state, "per_rank", false)) << name;
  }
  const Node* debiased = g.FindNode("fc1/weight/gossip/debiased");
  ASSERT_NE(debiased, nullptr);
  EXPECT_EQ(debiased->op(), "Div");
  EXPECT_EQ(debiased->input_edge(1)->src->name(), "gossip/weight");
  // The parameter's only reader besides the de-biasing is its update.
  for (const Edge* e : g.FindNode("fc1/weight")->out_edges()) {
    EXPECT_TRUE(e->dst == debiased || e->dst->op() == "ApplySgd") << e->dst->name();
  }
  EXPECT_EQ(g.FindNode("fc1/weight/gossip/mixed")->input_edge(1)->src->name(), "fc1/weight/gossip/in_flight_2");
  // Refusals.
  auto again = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(again.ok());
  (*again)->mutable_header()->mutable_records()->set_workers(4);
  auto complete = ParsePipeline("autodiff,sgd(lr=0.1),gossip(topology=complete,overlap=1)");
  ASSERT_TRUE(complete.ok());
  EXPECT_THAT(std::string(RunPipeline(**again, *complete).status().message()),
              HasSubstr("gossip: overlap=1 delays pushes; topology complete is an allreduce"));
}

// compress(fp16|bf16) after gossip puts the 16-bit wire on its pushes (the
// shifts, or the complete graph's group allreduce); codecs are refused there.
TEST(GossipTest, SixteenBitCompressionMarksThePushes) {
  for (const char* topology : {"exponential", "complete"}) {
    SCOPED_TRACE(topology);
    auto graph = LoadModel("models/mlp_fashion.pbtxt");
    ASSERT_TRUE(graph.ok()) << graph.status();
    (*graph)->mutable_header()->mutable_records()->set_workers(4);
    auto pipeline = ParsePipeline(absl::StrCat("autodiff,sgd(lr=0.1),gossip(topology=", topology, "),compress(method=bf16)"));
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    ASSERT_TRUE(RunPipeline(**graph, *pipeline).ok());
    int pushes = 0;
    for (Node* n : (*graph)->nodes()) {
      if (n->op() != "GroupSendRecv" && n->op() != "GroupAllReduce") continue;
      EXPECT_EQ(NodeAttrString(*n, "wire"), "bfloat16") << n->name();
      ++pushes;
    }
    EXPECT_GT(pushes, 0);
  }
  auto again = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(again.ok());
  (*again)->mutable_header()->mutable_records()->set_workers(4);
  auto qsgd = ParsePipeline("autodiff,sgd(lr=0.1),gossip,compress(method=qsgd)");
  ASSERT_TRUE(qsgd.ok());
  EXPECT_THAT(std::string(RunPipeline(**again, *qsgd).status().message()),
              HasSubstr("compress: gossip's pushes take fp16, bf16 or powersgd"));
}

TEST(SgdTest, BatchNormRunningStatisticsAreCarried) {
  auto graph = Planned("vgg11_bn_cifar", "autodiff,adam(lr=0.001)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  int carried = 0;
  for (Node* n : (*graph)->nodes()) {
    if (n->op() == "Feedback" && n->input_edge(0)->src->op() == "BatchNorm") ++carried;
  }
  EXPECT_EQ(carried, 2 * 8);  // mean and variance of 8 batch norms
}

TEST(SgdTest, RejectsBadHyperparameters) {
  EXPECT_THAT(std::string(Planned("mlp_fashion", "autodiff,sgd(momentum=1.5)").status().message()),
              HasSubstr("momentum must be in [0, 1)"));
  // Top-k's DGC momentum correction and sgd's momentum together apply it
  // twice (the run trains to chance): refused in either order, naming both
  // ways out; either alone plans.
  for (const char* twice : {"autodiff,data_parallel,compress(method=topk,ratio=0.01),sgd(lr=0.02,momentum=0.9)",
                            "autodiff,data_parallel,sgd(lr=0.02,momentum=0.9),compress(method=topk,ratio=0.01)"}) {
    std::string message(Planned("lenet_fashion", twice).status().message());
    EXPECT_THAT(message, HasSubstr("momentum would be applied twice")) << twice;
    EXPECT_THAT(message, HasSubstr("use sgd(momentum=0) with it, or compress(method=topk, momentum=0)")) << twice;
  }
  for (const char* once : {"autodiff,data_parallel,compress(method=topk,ratio=0.01),sgd(lr=0.02)",
                           "autodiff,data_parallel,compress(method=topk,ratio=0.01,momentum=0),sgd(lr=0.02,momentum=0.9)",
                           "autodiff,data_parallel,compress(method=qsgd),sgd(lr=0.02,momentum=0.9)"}) {
    EXPECT_TRUE(Planned("lenet_fashion", once).ok()) << once;
  }
  EXPECT_THAT(std::string(Planned("mlp_fashion", "autodiff,sgd(schedule=fast)").status().message()),
              HasSubstr("schedule=fast is not a schedule"));
}

TEST(DataParallelTest, EveryGradientIsAveragedOnce) {
  auto graph = Planned("lenet_fashion", "autodiff,data_parallel(bucket_kb=64),sgd(lr=0.1,momentum=0.9)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  int gradients = 0, reduced = 0;
  std::vector<int64_t> bucket_numbers;
  for (Node* n : (*graph)->nodes()) {
    if (n->op() == "Gradient") {
      ++gradients;
      EXPECT_EQ(n->input_edge(0)->src->op(), "AllReduce") << n->name();
    }
    if (n->op() == "AllReduce") {
      reduced += n->num_inputs();
      bucket_numbers.push_back(n->def().attr().at("bucket").i());
      int64_t bytes = 0;
      for (const ShapeAndType& out : n->outputs()) bytes += out.shape.KnownElements() * 4;
      // Over the cap only when the bucket is a single oversized gradient.
      if (n->num_inputs() > 1) {
        EXPECT_LE(bytes, 64 * 1024) << n->name();
      }
    }
  }
  EXPECT_EQ(reduced, gradients);
  EXPECT_GT(bucket_numbers.size(), 1u);
  std::sort(bucket_numbers.begin(), bucket_numbers.end());
  for (size_t i = 0; i < bucket_numbers.size(); ++i) EXPECT_EQ(bucket_numbers[i], static_cast<int64_t>(i));
  EXPECT_TRUE((*graph)->header().records().data_parallel());
}

TEST(DataParallelTest, FirstBucketHoldsTheLastLayer) {
  // Backward runs from the loss: the output layer's gradients are ready first.
  auto graph = Planned("mlp_fashion", "autodiff,data_parallel(bucket_kb=1),sgd(lr=0.1)");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Node* first = (*graph)->FindNode("data_parallel/bucket_0");
  ASSERT_NE(first, nullptr);
  bool last_layer = false;
  for (const Edge* e : first->out_edges()) last_layer |= absl::StrContains(e->dst->name(), "fc3");
  EXPECT_TRUE(last_layer) << "bucket 0 feeds " << first->out_edges()[0]->dst->name();
}

TEST(DataParallelTest, NeedsGradientsAndRefusesTwice) {
  EXPECT_THAT(Planned("mlp_fashion", "data_parallel").status().message(), HasSubstr("run autodiff first"));
  EXPECT_THAT(Planned("mlp_fashion", "autodiff,data_parallel,data_parallel").status().message(),
              HasSubstr("applied twice"));
  EXPECT_THAT(Planned("mlp_fashion", "autodiff,data_parallel(bucket_kb=0)").status().message(),
              HasSubstr("bucket_kb must be > 0"));
}

// compress with a codec: large weight gradients get their own
// CompressedAllReduce, small ones and biases stay in dense buckets, every
// gradient is averaged exactly once, the issue order is a permutation that
// follows readiness, and the codec's state is state (residuals per rank).
TEST(CompressTest, CompressesLargeWeightsAndKeepsTheRestDense) {
  auto graph = Planned("lenet_fashion", "autodiff,data_parallel(bucket_kb=64),compress(method=topk,ratio=0.05),sgd");
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<std::string> compressed;
  std::map<std::string, int64_t> bucket_of;  // gradient -> issue position of its collective
  std::vector<int64_t> buckets;
  for (Node* n : (*graph)->nodes()) {
    if (n->op() == "Gradient") {
      const std::string& src = n->input_edge(0)->src->op();
      EXPECT_TRUE(src == "AllReduce" || src == "CompressedAllReduce") << n->name() << " <- " << src;
      const TensorShape& shape = n->outputs()[0].shape;
      bool large = shape.KnownElements() >= 1024 && shape.rank() > 1;
      EXPECT_EQ(src == "CompressedAllReduce", large) << n->name();
      bucket_of[n->name()] = n->input_edge(0)->src->def().attr().at("bucket").i();
    }
    if (n->op() == "AllReduce" || n->op() == "CompressedAllReduce") buckets.push_back(n->def().attr().at("bucket").i());
    if (n->op() != "CompressedAllReduce") continue;
    EXPECT_EQ(n->def().attr().at("method").s(), "topk");
    EXPECT_EQ(n->def().attr().at("options").s(), "ratio=0.05");
    const int64_t g = n->def().attr().at("gradients").i();
    std::vector<std::string> names = absl::StrSplit(n->def().attr().at("names").s(), ',');
    ASSERT_EQ(static_cast<int64_t>(names.size()), g);
    compressed.insert(compressed.end(), names.begin(), names.end());
    ASSERT_EQ(n->num_inputs(), 3 * g);  // the gradients, then momentum and residual of each
    for (int i = static_cast<int>(g); i < n->num_inputs(); ++i) {
      Node* state = n->input_edge(i)->src;
      EXPECT_EQ(state->op(), "Parameter");
      EXPECT_TRUE(state->def().attr().at("per_rank").b()) << state->name();
      EXPECT_EQ(state->input_edge(0)->src->op(), "Feedback") << state->name();
    }
  }
  std::sort(compressed.begin(), compressed.end());
  EXPECT_EQ(compressed, std::vector<std::string>({"conv2/filter/grad", "fc1/weight/grad", "fc2/weight/grad"}));
  std::sort(buckets.begin(), buckets.end());
  for (size_t i = 0; i < buckets.size(); ++i) EXPECT_EQ(buckets[i], static_cast<int64_t>(i));
  // fc2 is nearer the loss than fc1, so its gradient is ready, and issued, no later.
  EXPECT_LE(bucket_of["fc2/weight/grad"], bucket_of["fc1/weight/grad"]);
  EXPECT_LE(bucket_of["fc1/weight/grad"], bucket_of["conv2/filter/grad"]);
  EXPECT_EQ((*graph)->header().records().compression().method(), "topk");
}

TEST(CompressTest, GradiveqTakesOnlyConvFilters) {
  auto graph = Planned("lenet_fashion", "autodiff,data_parallel,compress(method=gradiveq),sgd");
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<std::string> compressed;
  for (Node* n : (*graph)->nodes()) {
    if (n->op() == "CompressedAllReduce") compressed.push_back(n->def().attr().at("names").s());
  }
  EXPECT_EQ(compressed, std::vector<std::string>({"conv2/filter/grad"}));
}

TEST(CompressTest, SharedStateIsNotPerRank) {
  auto graph = Planned("lenet_fashion", "autodiff,data_parallel,compress(method=powersgd,rank=1),sgd");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Node* q = (*graph)->FindNode("compress/fc1/weight/grad/q");
  ASSERT_NE(q, nullptr);
  EXPECT_FALSE(q->def().attr().count("per_rank") > 0 && q->def().attr().at("per_rank").b());
}

TEST(CompressTest, RefusalsSayWhy) {
  auto message = [](const std::string& passes) { return std::string(Planned("lenet_fashion", passes).status().message()); };
  EXPECT_THAT(message("autodiff,compress(method=qsgd)"), HasSubstr("it goes after data_parallel"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=zip)"),
              HasSubstr("unknown method 'zip'; methods: fp16, bf16, gradiveq, onebit, powersgd, qsgd, terngrad, topk"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=qsgd,ratio=0.1)"),
              HasSubstr("qsgd has no option 'ratio'; its options: bits, bucket"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=qsgd,bits=9)"), HasSubstr("bits=9 must be in [2, 8]"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=fp16,bits=4)"), HasSubstr("fp16 takes no option 'bits'"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=powersgd,skip_biases=false,min_elements=1)"),
              HasSubstr("/bias/grad"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=qsgd,min_elements=100000000)"),
              HasSubstr("nothing to compress"));
  EXPECT_THAT(message("autodiff,data_parallel,compress(method=qsgd),compress(method=topk)"),
              HasSubstr("is already compressed"));
  EXPECT_THAT(message("autodiff,data_parallel,pipeline(width=2),compress(method=qsgd)"),
              HasSubstr("compress must come before pipeline"));
}

}  // namespace
}  // namespace nereid
