// The pass manager, autodiff and the optimizer passes on real models.

#include "gmock/gmock.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "graph/model_loader.h"
#include "gtest/gtest.h"
#include "passes/pass_manager.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Graph>> Planned(const std::string& model, const std::string& passes) {
  auto graph = LoadModel("models/" + model + ".pbtxt");
  if (!graph.ok()) return graph.status();
  auto pipeline = ParsePipeline(passes);
  if (!pipeline.ok()) return pipeline.status();
  auto reports = RunPipeline(**graph, *pipeline);
  if (!reports.ok()) return reports.status();
  return graph;
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
              HasSubstr("unknown pass 'autodif'; passes are: adam, autodiff, sgd"));
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
  EXPECT_THAT(std::string(Planned("mlp_fashion", "autodiff,sgd(schedule=fast)").status().message()),
              HasSubstr("schedule=fast is not a schedule"));
}

}  // namespace
}  // namespace nereid
