// Finite-difference check of every op's gradient: each case builds
//   inputs (Parameters) -> op -> Reshape [1, -1] -> SoftmaxCrossEntropy
// (a smooth scalar that mixes every output element), runs the autodiff pass,
// and compares the gradient the graph computes with central differences of
// the loss the graph computes, on the same kernels.
//
// Tolerances: kernels are float32, so a central difference with step h has
// rounding error about 1e-7 * |loss| / h and truncation error about h^2 * f'''.
// With h = 1e-2 and losses of order 1 both stay below 1e-3; we allow
// |analytic - numeric| <= 2e-3 + 2e-2 * |numeric|. Inputs of ops with kinks
// (Relu, max pooling, hinge) are drawn away from them so that no difference
// straddles one.

#include <cmath>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/op_registry.h"
#include "passes/pass_manager.h"
#include "schedulers/executor.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::IntsValue;
using testing::OpNode;
using testing::ShapeValue;

enum class Values { kUniform, kAwayFromZero, kDistinct, kPositive, kMask };

struct InputSpec {
  std::vector<int64_t> dims;
  Values values = Values::kUniform;
  bool trainable = true;
};

struct GradCase {
  std::string name;  // test name
  std::string op;
  std::vector<InputSpec> inputs;
  std::string attrs;                     // text of the op node's attrs
  std::vector<int32_t> labels;           // for loss ops: a labels Const as the last input
  bool scalar_output = false;            // loss ops: the op itself is the loss
  std::vector<int64_t> labels_dims;      // the labels' dims when not [labels.size()]
  int output = 0;                        // the op's output the loss reads
};

std::string LabelsConst(const std::vector<int32_t>& labels, std::vector<int64_t> dims = {}) {
  if (dims.empty()) dims = {static_cast<int64_t>(labels.size())};
  std::string values = "tensor { dtype: DT_INT32 " + ShapeValue(dims) + " ";
  for (int32_t l : labels) absl::StrAppend(&values, "int_val: ", l, " ");
  return values + "}";
}

std::string BuildGraph(const GradCase& c) {
  std::string text = "attr { key: \"loss\" value { s: \"loss\" } }\n";
  std::vector<std::string> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::string name = absl::StrCat("p", i);
    text += OpNode(name, "Parameter", {},
                   Attr("shape", ShapeValue(c.inputs[i].dims)) +
                       Attr("trainable", c.inputs[i].trainable ? "b: true" : "b: false"));
    inputs.push_back(name);
  }
  if (!c.labels.empty()) {
    text += OpNode("labels", "Const", {}, Attr("value", LabelsConst(c.labels, c.labels_dims)));
    inputs.push_back("labels");
  }
  if (c.scalar_output) {
    text += OpNode("loss", c.op, inputs, c.attrs);
    return text;
  }
  text += OpNode("y", c.op, inputs, c.attrs);
  text += OpNode("flat", "Reshape", {c.output == 0 ? std::string("y") : absl::StrCat("y:", c.output)},
                 Attr("shape", IntsValue({1, -1})));
  text += OpNode("label0", "Const", {}, Attr("value", LabelsConst({0})));
  text += OpNode("loss", "SoftmaxCrossEntropy", {"flat", "label0"});
  return text;
}

std::vector<float> Draw(int64_t n, Values kind, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = u(rng);
    if (kind == Values::kAwayFromZero) x = x < 0 ? x - 0.1f : x + 0.1f;
    if (kind == Values::kPositive) x = 0.5f + std::fabs(x);
    if (kind == Values::kMask) x = i % 3 == 0 ? 0.0f : 1.0f;
    v[i] = x;
  }
  if (kind == Values::kDistinct) {
    // A shuffled ramp: neighbours differ by at least 0.05, more than 2h.
    for (int64_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * static_cast<float>(i);
    std::shuffle(v.begin(), v.end(), rng);
  }
  return v;
}

class GradientCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientCheck, MatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  auto graph = testing::LoadText(BuildGraph(c));
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto pipeline = ParsePipeline("autodiff");
  ASSERT_TRUE(pipeline.ok());
  auto reports = RunPipeline(**graph, *pipeline);
  ASSERT_TRUE(reports.ok()) << reports.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();
  Executor& e = **executor;

  std::mt19937_64 rng(42);
  std::vector<std::string> fetches = {"loss"};
  std::vector<Tensor> params;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    auto t = Tensor::FromVector(c.inputs[i].dims, Draw(Tensor::Allocate(DT_FLOAT, c.inputs[i].dims)->num_elements(),
                                                       c.inputs[i].values, rng));
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(e.SetState(absl::StrCat("p", i), *t).ok());
    params.push_back(*t);
    if (c.inputs[i].trainable) fetches.push_back(absl::StrCat("p", i, "/grad"));
  }
  StepInfo step;  // training mode, step 0: dropout draws the same mask every run
  auto analytic = e.Evaluate(step, {}, fetches);
  ASSERT_TRUE(analytic.ok()) << analytic.status();

  constexpr float h = 1e-2f;
  auto loss_at = [&](size_t p, int64_t i, float delta) {
    Tensor t = *params[p].Clone();
    t.data<float>()[i] += delta;
    EXPECT_TRUE(e.SetState(absl::StrCat("p", p), t).ok());
    float loss = (*e.Evaluate(step, {}, {"loss"}))[0].data<float>()[0];
    EXPECT_TRUE(e.SetState(absl::StrCat("p", p), params[p]).ok());
    return static_cast<double>(loss);
  };
  int fetched = 1;
  for (size_t p = 0; p < c.inputs.size(); ++p) {
    if (!c.inputs[p].trainable) continue;
    const Tensor& grad = (*analytic)[fetched++];
    ASSERT_EQ(grad.dims(), params[p].dims());
    int64_t n = grad.num_elements();
    int64_t stride = std::max<int64_t>(1, n / 16);  // up to 16 elements per input
    for (int64_t i = 0; i < n; i += stride) {
      double numeric = (loss_at(p, i, h) - loss_at(p, i, -h)) / (2 * h);
      double a = grad.data<float>()[i];
      EXPECT_NEAR(a, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << c.name << ": input " << p << " element " << i;
    }
  }
}

std::string Conv(const std::vector<int64_t>& strides, const std::string& padding, int64_t groups = 1,
                 const std::vector<int64_t>& dilations = {1, 1}) {
  return Attr("strides", IntsValue(strides)) + Attr("padding", absl::StrCat("s: \"", padding, "\"")) +
         Attr("groups", absl::StrCat("i: ", groups)) + Attr("dilations", IntsValue(dilations));
}

std::string Pool(const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides, const std::string& padding) {
  return Attr("ksize", IntsValue(ksize)) + Attr("strides", IntsValue(strides)) +
         Attr("padding", absl::StrCat("s: \"", padding, "\""));
}

const std::vector<GradCase>& Cases() {
  static const std::vector<GradCase> cases = {
      {"MatMul", "MatMul", {{{3, 4}}, {{4, 5}}}},
      {"MatMulTransposeA", "MatMul", {{{4, 3}}, {{4, 5}}}, Attr("transpose_a", "b: true")},
      {"MatMulTransposeB", "MatMul", {{{3, 4}}, {{5, 4}}}, Attr("transpose_b", "b: true")},
      {"MatMulTransposeBoth", "MatMul", {{{4, 3}}, {{5, 4}}},
       Attr("transpose_a", "b: true") + Attr("transpose_b", "b: true")},
      {"BiasAddFeatures", "BiasAdd", {{{3, 5}}, {{5}}}},
      {"BiasAddImages", "BiasAdd", {{{2, 3, 4, 4}}, {{3}}}},
      {"Relu", "Relu", {{{2, 7}, Values::kAwayFromZero}}},
      {"Sigmoid", "Sigmoid", {{{2, 7}}}},
      {"Tanh", "Tanh", {{{2, 7}}}},
      {"Softmax", "Softmax", {{{3, 5}}}},
      {"Conv2DValid", "Conv2D", {{{2, 3, 7, 7}}, {{4, 3, 3, 3}}}, Conv({1, 1}, "VALID")},
      {"Conv2DSameStride2", "Conv2D", {{{2, 3, 7, 7}}, {{4, 3, 3, 3}}}, Conv({2, 2}, "SAME")},
      {"Conv2DGroups", "Conv2D", {{{1, 4, 6, 6}}, {{4, 2, 3, 3}}}, Conv({1, 1}, "VALID", 2)},
      // Depthwise (one channel per group), on maps smaller than the window.
      {"Conv2DDepthwiseTiny", "Conv2D", {{{2, 4, 2, 2}}, {{4, 1, 3, 3}}}, Conv({1, 1}, "SAME", 4)},
      {"Conv2DDepthwise", "Conv2D", {{{2, 3, 5, 5}}, {{3, 1, 3, 3}}}, Conv({1, 1}, "SAME", 3)},
      {"Conv2DDilated", "Conv2D", {{{1, 2, 7, 7}}, {{3, 2, 3, 3}}}, Conv({1, 1}, "VALID", 1, {2, 2})},
      {"MaxPool", "MaxPool", {{{2, 3, 6, 6}, Values::kDistinct}}, Pool({2, 2}, {2, 2}, "VALID")},
      // Wide enough for the four-window SSE2 path, with a scalar tail and an
      // odd row and column no window covers.
      {"MaxPoolWide", "MaxPool", {{{1, 2, 9, 21}, Values::kDistinct}}, Pool({2, 2}, {2, 2}, "VALID")},
      {"MaxPoolOverlapping", "MaxPool", {{{1, 2, 5, 5}, Values::kDistinct}}, Pool({3, 3}, {1, 1}, "SAME")},
      {"AvgPool", "AvgPool", {{{2, 3, 6, 6}}}, Pool({2, 2}, {2, 2}, "VALID")},
      {"AvgPoolSame", "AvgPool", {{{1, 2, 5, 5}}}, Pool({3, 3}, {2, 2}, "SAME")},
      {"AvgPoolSameCountingPadding", "AvgPool", {{{1, 2, 5, 5}}},
       Pool({3, 3}, {2, 2}, "SAME") + Attr("count_padding", "b: true")},
      {"GlobalAvgPool", "GlobalAvgPool", {{{2, 3, 4, 4}}}},
      {"SoftmaxCrossEntropy", "SoftmaxCrossEntropy", {{{4, 5}}}, "", {0, 3, 4, 1}, true},
      {"HingeLoss", "HingeLoss", {{{4, 5}, Values::kDistinct}}, "", {0, 3, 4, 1}, true},
      {"LogisticLoss", "LogisticLoss", {{{4, 5}}}, "", {0, 3, 4, 1}, true},
      // Next-token loss over [B, T, V] with a padded (ignored) position.
      {"SoftmaxCrossEntropySequence", "SoftmaxCrossEntropy", {{{2, 3, 5}}}, Attr("ignore_index", "i: -1"),
       {0, 4, -1, 2, 2, 1}, true, {2, 3}},
      {"AddBroadcast", "Add", {{{3, 4}}, {{4}}}},
      {"MulBroadcast", "Mul", {{{3, 4}}, {{3, 1}}}},
      {"Flatten", "Flatten", {{{2, 3, 4}}}},
      {"Reshape", "Reshape", {{{2, 6}}}, Attr("shape", IntsValue({3, 4}))},
      {"Concat", "Concat", {{{2, 3}}, {{2, 2}}}, Attr("axis", "i: 1")},
      {"Dropout", "Dropout", {{{4, 8}}}, Attr("rate", "f: 0.3") + Attr("seed", "i: 5")},
      {"Identity", "Identity", {{{3}}}},
      // In one process a pair is the identity; across processes the
      // distributed stage_split test checks the transferred gradients.
      {"Send", "Send", {{{3, 4}}}},
      {"Recv", "Recv", {{{3, 4}}}},
      // Copies between memories: identities on today's host executor.
      {"CopyToDevice", "CopyToDevice", {{{3, 4}}}, Attr("device", "s: \"sim:0\"")},
      {"CopyToHost", "CopyToHost", {{{3, 4}}}, Attr("device", "s: \"sim:0\"")},
      {"AddN", "AddN", {{{3, 4}}, {{3, 4}}, {{3, 4}}}},
      // Transformer and vision-network ops (PyTorch's exports).
      {"SubBroadcast", "Sub", {{{3, 4}}, {{4}}}},
      {"DivBroadcast", "Div", {{{3, 4}}, {{3, 1}, Values::kPositive}}},
      {"Pow", "Pow", {{{3, 4}, Values::kPositive}, {{4}}}},
      {"Sqrt", "Sqrt", {{{2, 7}, Values::kPositive}}},
      {"Reciprocal", "Reciprocal", {{{2, 7}, Values::kPositive}}},
      {"Exp", "Exp", {{{2, 7}}}},
      {"Log", "Log", {{{2, 7}, Values::kPositive}}},
      {"Neg", "Neg", {{{2, 7}}}},
      {"Erf", "Erf", {{{2, 7}}}},
      {"Gelu", "Gelu", {{{2, 7}}}},
      {"GeluTanh", "Gelu", {{{2, 7}}}, Attr("approximate", "s: \"tanh\"")},
      // Bounds and kinks 0.025 away from every value of the ramp.
      {"Clip", "Clip", {{{4, 8}, Values::kDistinct}}, Attr("min", "f: -0.425") + Attr("max", "f: 0.475")},
      {"HardSigmoid", "HardSigmoid", {{{4, 8}, Values::kDistinct}}, Attr("alpha", "f: 0.8") + Attr("beta", "f: 0.5")},
      {"HardSwish", "HardSwish", {{{2, 7}}}},
      {"SoftmaxAxis0", "Softmax", {{{3, 5}}}, Attr("axis", "i: 0")},
      {"LogSoftmax", "LogSoftmax", {{{3, 5}}}},
      {"LogSoftmaxAxis1Of3", "LogSoftmax", {{{2, 3, 4}}}, Attr("axis", "i: 1")},
      {"Transpose", "Transpose", {{{2, 3, 4}}}, Attr("perm", IntsValue({2, 0, 1}))},
      {"TransposeReversed", "Transpose", {{{2, 3, 4}}}},
      {"BatchMatMul", "BatchMatMul", {{{2, 3, 4}}, {{2, 4, 5}}}},
      {"BatchMatMulSharedRight", "BatchMatMul", {{{2, 3, 4}}, {{4, 5}}}},
      {"BatchMatMulSharedRightTransposed", "BatchMatMul", {{{2, 3, 4}}, {{5, 4}}}, Attr("transpose_b", "b: true")},
      {"AddBiasOverTheLastAxis", "Add", {{{2, 3, 4}}, {{4}}}},
      {"MulByAScalar", "Mul", {{{2, 3, 4}}, {{1}}}},
      {"BatchMatMulBroadcast", "BatchMatMul", {{{2, 1, 3, 4}}, {{3, 5, 4}}}, Attr("transpose_b", "b: true")},
      {"BatchMatMulTransposeA", "BatchMatMul", {{{2, 4, 3}}, {{2, 4, 5}}}, Attr("transpose_a", "b: true")},
      {"Slice", "Slice", {{{3, 7}}}, Attr("axis", "i: 1") + Attr("begin", "i: 1") + Attr("size", "i: 4")},
      {"SliceStrided", "Slice", {{{2, 7, 3}}},
       Attr("axis", "i: 1") + Attr("begin", "i: 0") + Attr("size", "i: 4") + Attr("stride", "i: 2")},
      // The loss's softmax over the flattened output would see -inf: a
      // finite fill checks the same gradient.
      {"CausalMask", "CausalMask", {{{2, 3, 4}}}, Attr("value", "f: -3")},
      {"Where", "Where", {{{2, 3}, Values::kMask, false}, {{2, 3}}, {{3}}}},
      {"Expand", "Expand", {{{3, 1}}}, Attr("shape", IntsValue({2, -1, 4}))},
      {"Cast", "Cast", {{{2, 3}}}, Attr("to", "type: DT_FLOAT")},
      {"Pad", "Pad", {{{2, 3, 4}}}, Attr("pads", IntsValue({0, 1, 2, 1, 0, 1})) + Attr("value", "f: 0.5")},
      {"Gather", "Gather", {{{5, 3}}}, "", {0, 3, 4, 1, 3}},
      {"GatherAxis1", "Gather", {{{2, 5, 3}}}, Attr("axis", "i: 1"), {4, 0, 4}},
      {"LayerNorm", "LayerNorm", {{{4, 6}}, {{6}}, {{6}}}},
      {"LayerNormLastTwo", "LayerNorm", {{{2, 3, 4}}, {{3, 4}}, {{3, 4}}}, Attr("axis", "i: 1")},
      {"ReduceSum", "ReduceSum", {{{3, 4}}}, Attr("axes", IntsValue({1})) + Attr("keepdims", "b: false")},
      {"ReduceMeanApart", "ReduceMean", {{{2, 3, 4}}}, Attr("axes", IntsValue({0, 2}))},
      {"ReduceMax", "ReduceMax", {{{3, 5}, Values::kDistinct}}, Attr("axes", IntsValue({-1}))},
      // LSTM through time: x [T=3, B=2, I=4], hidden 2; each output's path.
      {"LstmLayer", "LstmLayer", {{{3, 2, 4}}, {{8, 4}}, {{8, 2}}, {{8}}}, Attr("hidden_size", "i: 2")},
      {"LstmLayerReverseWithState", "LstmLayer", {{{3, 2, 4}}, {{8, 4}}, {{8, 2}}, {{8}}, {{2, 2}}, {{2, 2}}},
       Attr("hidden_size", "i: 2") + Attr("reverse", "b: true")},
      {"LstmLayerLastHidden", "LstmLayer", {{{3, 2, 4}}, {{8, 4}}, {{8, 2}}, {{8}}, {{2, 2}}, {{2, 2}}},
       Attr("hidden_size", "i: 2"), {}, false, {}, 1},
      {"LstmLayerLastCell", "LstmLayer", {{{4, 1, 3}}, {{8, 3}}, {{8, 2}}, {{8}}}, Attr("hidden_size", "i: 2") +
       Attr("reverse", "b: true"), {}, false, {}, 2},
      // GRU (gates z, r, h; bias [6H]): both placements of the reset gate.
      {"GruLayer", "GruLayer", {{{3, 2, 4}}, {{6, 4}}, {{6, 2}}, {{12}}}, Attr("hidden_size", "i: 2")},
      {"GruLayerLinearBeforeResetWithState", "GruLayer", {{{3, 2, 4}}, {{6, 4}}, {{6, 2}}, {{12}}, {{2, 2}}},
       Attr("hidden_size", "i: 2") + Attr("linear_before_reset", "b: true")},
      {"GruLayerReverseWithState", "GruLayer", {{{3, 2, 4}}, {{6, 4}}, {{6, 2}}, {{12}}, {{2, 2}}},
       Attr("hidden_size", "i: 2") + Attr("reverse", "b: true")},
      {"GruLayerLastHidden", "GruLayer", {{{4, 1, 3}}, {{6, 3}}, {{6, 2}}, {{12}}, {{1, 2}}},
       Attr("hidden_size", "i: 2") + Attr("linear_before_reset", "b: true") + Attr("reverse", "b: true"), {}, false,
       {}, 1},
      {"BatchNorm", "BatchNorm",
       {{{4, 3, 3, 3}}, {{3}, Values::kPositive}, {{3}}, {{3}, Values::kUniform, false}, {{3}, Values::kPositive, false}}},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryOp, GradientCheck, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; });

// Every op either has a gradient or says why not, and every op with a
// gradient is checked above: a new op cannot skip either.
TEST(GradientCoverage, EveryOpHasAGradientOrAReason) {
  std::set<std::string> checked;
  for (const GradCase& c : Cases()) checked.insert(c.op);
  for (const std::string& name : OpRegistry::Global().OpNames()) {
    const OpDef* def = OpRegistry::Global().Find(name);
    EXPECT_TRUE(def->grad_fn || !def->no_gradient.empty()) << name << " has neither a gradient nor a reason";
    // Group collectives need several ranks: group_collective_gradient_test.cc
    // checks them (and that it covers every one).
    if (def->grad_fn && name.rfind("Group", 0) != 0) {
      EXPECT_TRUE(checked.count(name)) << name << " has a gradient that no finite-difference case checks";
    }
  }
}

}  // namespace
}  // namespace nereid
