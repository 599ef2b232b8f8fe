// Every model in models/ loads, and `nereid check`'s parameter count agrees
// with a count by hand, written out layer by layer below.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/model_loader.h"
#include "ops/model_summary.h"

namespace nereid {
namespace {

// Hand counts. dense: weights plus bias. conv: OIHW filter, plus bias when no
// batch norm follows. bn: scale and offset (running statistics are state).
constexpr int64_t Dense(int64_t in, int64_t out) { return in * out + out; }
constexpr int64_t Conv(int64_t in, int64_t out, int64_t k, bool bias = true) { return out * in * k * k + (bias ? out : 0); }
constexpr int64_t Bn(int64_t c) { return 2 * c; }

constexpr int64_t kMlp = Dense(784, 512) + Dense(512, 512) + Dense(512, 10);
constexpr int64_t kLenet = Conv(1, 6, 5) + Conv(6, 16, 5) + Dense(400, 120) + Dense(120, 84) + Dense(84, 10);
constexpr int64_t kVggClassifier = Dense(512, 4096) + Dense(4096, 4096) + Dense(4096, 10);
constexpr int64_t kVgg11 = Conv(3, 64, 3) + Conv(64, 128, 3) + Conv(128, 256, 3) + Conv(256, 256, 3) +
                           Conv(256, 512, 3) + 3 * Conv(512, 512, 3) + kVggClassifier;
constexpr int64_t kVgg11Bn = Conv(3, 64, 3, false) + Conv(64, 128, 3, false) + Conv(128, 256, 3, false) +
                             Conv(256, 256, 3, false) + Conv(256, 512, 3, false) + 3 * Conv(512, 512, 3, false) +
                             Bn(64) + Bn(128) + 2 * Bn(256) + 4 * Bn(512) + kVggClassifier;
constexpr int64_t kVgg16 = Conv(3, 64, 3) + Conv(64, 64, 3) + Conv(64, 128, 3) + Conv(128, 128, 3) +
                           Conv(128, 256, 3) + 2 * Conv(256, 256, 3) + Conv(256, 512, 3) + 5 * Conv(512, 512, 3) +
                           kVggClassifier;
// Stem, then per stage: first block (maybe strided, with a projection
// shortcut), two more blocks; then the classifier.
constexpr int64_t Block(int64_t c) { return 2 * (Conv(c, c, 3, false) + Bn(c)); }
constexpr int64_t DownBlock(int64_t in, int64_t out) {
  return Conv(in, out, 3, false) + Bn(out) + Conv(out, out, 3, false) + Bn(out) + Conv(in, out, 1, false) + Bn(out);
}
constexpr int64_t kResnet20 = Conv(3, 16, 3, false) + Bn(16) + 3 * Block(16) + DownBlock(16, 32) + 2 * Block(32) +
                              DownBlock(32, 64) + 2 * Block(64) + Dense(64, 10);
// The same network on Fashion-MNIST: one input channel instead of three.
constexpr int64_t kResnet20Fashion = kResnet20 - Conv(3, 16, 3, false) + Conv(1, 16, 3, false);
constexpr int64_t kLinear = Dense(784, 10);
// The byte transformer: token and position embeddings (the token table is
// also the output layer), per block two LayerNorms, Q, K, V and the output
// projection, the MLP up 4x and down; a final LayerNorm.
constexpr int64_t Ln(int64_t d) { return 2 * d; }
constexpr int64_t TransformerBlock(int64_t d) { return 2 * Ln(d) + 4 * Dense(d, d) + Dense(d, 4 * d) + Dense(4 * d, d); }
constexpr int64_t kCharTransformer = 256 * 256 + 128 * 256 + 4 * TransformerBlock(256) + Ln(256);

struct Expected {
  const char* path;
  int64_t parameters;
  const char* logits = "[?,10]";
};

class ModelsTest : public ::testing::TestWithParam<Expected> {};

TEST_P(ModelsTest, LoadsAndMatchesTheHandCount) {
  auto graph = LoadModel(GetParam().path);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ModelSummary summary = SummarizeModel(**graph);
  EXPECT_EQ(summary.trainable_parameters, GetParam().parameters);
  // Every weight takes part in at least one multiply-add (2 FLOPs) per sample.
  EXPECT_GE(summary.flops_per_sample, summary.trainable_parameters);
  // Every model ends in a scalar loss over [batch, 10] logits (the language
  // model: [batch, positions, 256]).
  const Node* loss = (*graph)->FindNode("loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->outputs()[0].shape.rank(), 0);
  EXPECT_EQ((*graph)->FindNode("logits")->outputs()[0].shape.ToString(), GetParam().logits);
}

INSTANTIATE_TEST_SUITE_P(
    AllModels, ModelsTest,
    ::testing::Values(Expected{"models/mlp_fashion.pbtxt", kMlp}, Expected{"models/lenet_fashion.pbtxt", kLenet},
                      Expected{"models/vgg11_cifar.pbtxt", kVgg11}, Expected{"models/vgg11_bn_cifar.pbtxt", kVgg11Bn},
                      Expected{"models/vgg16_cifar.pbtxt", kVgg16}, Expected{"models/resnet20_cifar.pbtxt", kResnet20},
                      Expected{"models/resnet20_fashion.pbtxt", kResnet20Fashion},
                      Expected{"models/logreg_fashion.pbtxt", kLinear}, Expected{"models/svm_fashion.pbtxt", kLinear},
                      Expected{"models/char_transformer.pbtxt", kCharTransformer, "[?,128,256]"}),
    [](const ::testing::TestParamInfo<Expected>& info) {
      std::string name = info.param.path;
      name = name.substr(name.find('/') + 1);
      return name.substr(0, name.find('.'));
    });

TEST(ModelsTest, PublishedCounts) {
  // The figure for the MLP, and the well-known ResNet-20 size.
  static_assert(kMlp == 669706);
  static_assert(kLenet == 61706);
  static_assert(kResnet20 == 272474);
}

TEST(ModelsTest, MlpFlopsAreTheMatMulsPlusElementwise) {
  auto graph = LoadModel("models/mlp_fashion.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  ModelSummary summary = SummarizeModel(**graph);
  int64_t matmuls = 2 * (784 * 512 + 512 * 512 + 512 * 10);
  int64_t bias_and_relu = 512 * 2 + 512 * 2 + 10;
  int64_t loss = 4 * 10;
  EXPECT_EQ(summary.flops_per_sample, matmuls + bias_and_relu + loss);
}

TEST(ModelsTest, BatchNormStatisticsAreStateNotParameters) {
  auto graph = LoadModel("models/resnet20_cifar.pbtxt");
  ASSERT_TRUE(graph.ok()) << graph.status();
  ModelSummary summary = SummarizeModel(**graph);
  // Two running statistics per channel of each of the 21 batch norms.
  int64_t channels = 16 + 3 * 2 * 16 + (2 * 32 + 32) + 2 * 2 * 32 + (2 * 64 + 64) + 2 * 2 * 64;
  EXPECT_EQ(summary.state_elements, 2 * channels);
}

}  // namespace
}  // namespace nereid
