// Each GPU kernel against the host's kernel for the same op (--config=cuda;
// skipped with a message where there is no GPU): a one-op graph evaluated on
// the host and placed on cuda, fed the same random values. Cases cover what
// the kernels special-case: transposes, 2-D and 4-D bias, ignored labels,
// each SGD and Adam variant, SAME padding with an odd total (asymmetric),
// groups, dilation, max-pooling windows with ties (routing a gradient to the
// first maximum), broadcasting shapes, sums of more inputs than one launch
// takes, batch norm in both phases (with its statistics outputs) and over
// channels of several reduction chunks, batched products with each
// transpose and each way of broadcasting batches, layer norm over widths
// below, at and past its eight-lane sums, gathers with repeated and
// negative ids (their gradient's sums in the ids' order). cuBLAS, cuDNN,
// batch norm, GELU and softmax compute in other orders or forms than
// oneDNN, so values agree within a tolerance, not bit for bit; dropout
// masks, Add, Mul, AddN, ReduceToShapeOf, GlobalAvgPool, LayerNorm and its
// gradient, Transpose, CausalMask, Gather and GatherGrad compute as the
// host does and agree exactly, as do Concat, Slice, Pad and their
// gradients, which only move values.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "ops/kernel.h"
#include "schedulers/executor.h"
#include "tests/gpu_gate.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::InputNode;
using testing::IntsValue;
using testing::OpNode;

struct OpCase {
  std::string name;
  std::string graph;  // Input nodes and the op "y" (and more outputs as fetched)
  std::vector<std::string> fetches = {"y"};
  bool small_integers = false;  // feed floats in {-1, 0, 1, 2}: ties in windows
  float tolerance = 1e-4f;
  std::vector<std::string> positive = {};  // Inputs fed |normal| + 0.1 (variances)
  bool training = true;                    // the step's phase (batch norm's)
  int64_t ids = 0;  // > 0: integer inputs are ids in [-ids, ids) (negative: from the end), not labels
};

// Random feeds for every Input of `graph`: normal floats (positive where
// the case asks), or small integers; integers are labels in [0, 10) with
// one row marked -100 (ignored), or ids where the case asks.
FeedMap FeedsFor(const Graph& graph, const OpCase& c) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  FeedMap feeds;
  for (const Node* n : graph.nodes()) {
    if (n->op() != "Input") continue;
    const std::vector<int64_t>& dims = n->outputs()[0].shape.dims();
    Tensor t = *Tensor::Allocate(n->outputs()[0].dtype, dims);
    const bool positive = std::find(c.positive.begin(), c.positive.end(), n->name()) != c.positive.end();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (t.dtype() == DT_INT32 || t.dtype() == DT_INT64) {
        const int64_t v = c.ids > 0 ? static_cast<int64_t>(rng() % (2 * c.ids)) - c.ids
                                    : (i == 1 ? -100 : static_cast<int64_t>(rng() % 10));
        if (t.dtype() == DT_INT32) t.data<int32_t>()[i] = static_cast<int32_t>(v);
        if (t.dtype() == DT_INT64) t.data<int64_t>()[i] = v;
      } else if (c.small_integers) {
        t.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 4) - 1);
      } else {
        t.data<float>()[i] = positive ? std::fabs(normal(rng)) + 0.1f : normal(rng);
      }
    }
    feeds[n->name()] = t;
  }
  return feeds;
}

// The case's graph, on the host or placed on cuda by hand (the place pass
// runs on training plans only): every Input reaches the op through a
// CopyToDevice, the op runs on cuda:0, and the fetched values are read back.
absl::StatusOr<std::unique_ptr<Graph>> Build(const OpCase& c, bool on_gpu) {
  if (!on_gpu) return testing::LoadText(c.graph);
  auto unplaced = testing::LoadText(c.graph);
  if (!unplaced.ok()) return unplaced.status();
  std::vector<std::string> inputs;
  for (const Node* n : (*unplaced)->nodes()) {
    if (n->op() == "Input") inputs.push_back(n->name());
  }
  // Re-emit the text with the op's inputs renamed to their copies; the op
  // "y" and any nodes written after it go on the device.
  std::string graph = c.graph;
  const size_t op_at = graph.find("node {\n  name: \"y\"");
  std::string op = graph.substr(op_at);
  graph = graph.substr(0, op_at);
  for (const std::string& in : inputs) {
    absl::StrAppend(&graph, OpNode(in + "/to_cuda", "CopyToDevice", {in},
                                   Attr("device", "s: \"cuda:0\"") + "  device: \"cuda:0\"\n"));
    const std::string from = absl::StrCat("input: \"", in, "\"");
    for (size_t at = op.find(from); at != std::string::npos; at = op.find(from, at + 1)) {
      op.replace(at, from.size(), absl::StrCat("input: \"", in, "/to_cuda\""));
    }
  }
  // The op and the nodes after it (an Identity fetching a second output).
  for (size_t at = op.find("\n}\n"); at != std::string::npos; at = op.find("\n}\n", at + 20)) {
    op.insert(at + 1, "  device: \"cuda:0\"\n");
  }
  auto placed = testing::LoadText(graph + op);
  if (!placed.ok()) return placed.status();
  PlanRecords::Placement* record = (*placed)->mutable_header()->mutable_records()->mutable_placement();
  record->set_device("cuda:0");
  record->set_compute_streams(1);
  int on_device = 0;
  for (const Node* n : (*placed)->nodes()) on_device += n->def().device() == "cuda:0" ? 1 : 0;
  record->set_device_nodes(on_device);
  return placed;
}

absl::StatusOr<std::vector<Tensor>> Evaluate(const OpCase& c, bool on_gpu) {
  auto graph = Build(c, on_gpu);
  if (!graph.ok()) return graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  if (!executor.ok()) return executor.status();
  StepInfo step;
  step.step = 3;  // dropout's mask and Adam's bias correction depend on it
  step.training = c.training;
  return (*executor)->Evaluate(step, FeedsFor(**graph, c), c.fetches);
}


class GpuKernelTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(GpuKernelTest, MatchesTheHostKernel) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const OpCase& c = GetParam();
  auto host = Evaluate(c, false);
  ASSERT_TRUE(host.ok()) << host.status();
  auto gpu = Evaluate(c, true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(host->size(), gpu->size());
  for (size_t f = 0; f < host->size(); ++f) {
    SCOPED_TRACE(c.fetches[f]);
    const Tensor& a = (*host)[f];
    const Tensor& b = (*gpu)[f];
    ASSERT_EQ(a.dims(), b.dims());
    ASSERT_EQ(a.dtype(), b.dtype());
    if (a.dtype() != DT_FLOAT) {
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.num_bytes()), 0) << "the integers differ";
      continue;
    }
    int64_t far = 0, first = -1;
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      const float x = a.data<float>()[i], y = b.data<float>()[i];
      if (std::fabs(x - y) > c.tolerance * std::max({1.0f, std::fabs(x), std::fabs(y)})) {
        if (first < 0) first = i;
        ++far;
      }
    }
    EXPECT_EQ(far, 0) << far << " of " << a.num_elements() << " values differ; the first at " << first << ": host "
                      << a.data<float>()[first < 0 ? 0 : first] << ", gpu " << b.data<float>()[first < 0 ? 0 : first];
  }
}

std::string Conv(const std::string& op, const std::vector<std::string>& inputs, const std::string& attrs) {
  return OpNode("y", op, inputs, attrs);
}

std::string ConvAttrs(const std::string& padding, std::vector<int64_t> strides, std::vector<int64_t> dilations,
                      int groups) {
  return Attr("padding", absl::StrCat("s: \"", padding, "\"")) + Attr("strides", IntsValue(strides)) +
         Attr("dilations", IntsValue(dilations)) + Attr("groups", absl::StrCat("i: ", groups));
}

// x [2, 4, side, side], filter [6, 4/groups, 3, 3], dy the output's shape.
std::vector<OpCase> ConvCases() {
  std::vector<OpCase> cases;
  struct Geometry {
    std::string name, padding;
    int64_t side;
    std::vector<int64_t> strides, dilations;
    int groups;
    std::vector<int64_t> y;  // output dims
  };
  for (const Geometry& g : std::vector<Geometry>{
           {"same", "SAME", 9, {1, 1}, {1, 1}, 1, {2, 6, 9, 9}},
           // SAME at stride 2 on 9: one row of padding on each side.
           {"same_stride2", "SAME", 9, {2, 2}, {1, 1}, 1, {2, 6, 5, 5}},
           // On 8: a total of one, below and right only (the padded copy).
           {"same_stride2_asymmetric", "SAME", 8, {2, 2}, {1, 1}, 1, {2, 6, 4, 4}},
           {"valid_dilated", "VALID", 9, {1, 1}, {2, 2}, 1, {2, 6, 5, 5}},
           {"groups2", "SAME", 9, {1, 1}, {1, 1}, 2, {2, 6, 9, 9}},
       }) {
    const std::string inputs = InputNode("x", {2, 4, g.side, g.side}) + InputNode("f", {6, 4 / g.groups, 3, 3}) +
                               InputNode("dy", g.y);
    const std::string attrs = ConvAttrs(g.padding, g.strides, g.dilations, g.groups);
    cases.push_back({"conv_" + g.name, inputs + Conv("Conv2D", {"x", "f"}, attrs)});
    cases.push_back({"conv_input_grad_" + g.name, inputs + Conv("Conv2DBackpropInput", {"x", "f", "dy"}, attrs)});
    cases.push_back({"conv_filter_grad_" + g.name, inputs + Conv("Conv2DBackpropFilter", {"x", "f", "dy"}, attrs)});
  }
  return cases;
}

std::string PoolAttrs(std::vector<int64_t> ksize, std::vector<int64_t> strides, const std::string& padding) {
  return Attr("ksize", IntsValue(ksize)) + Attr("strides", IntsValue(strides)) +
         Attr("padding", absl::StrCat("s: \"", padding, "\""));
}

std::vector<OpCase> PoolCases() {
  std::vector<OpCase> cases;
  const std::string x = InputNode("x", {2, 3, 8, 8});
  const std::string x_odd = InputNode("x", {2, 3, 7, 7});
  for (bool ties : {false, true}) {
    const std::string tag = ties ? "_ties" : "";
    cases.push_back({"maxpool2" + tag, x + OpNode("y", "MaxPool", {"x"}, PoolAttrs({2, 2}, {2, 2}, "VALID")), {"y"},
                     ties});
    cases.push_back({"maxpool_grad2" + tag,
                     x + InputNode("dy", {2, 3, 4, 4}) +
                         OpNode("y", "MaxPoolGrad", {"x", "dy"}, PoolAttrs({2, 2}, {2, 2}, "VALID")),
                     {"y"},
                     ties});
    cases.push_back({"maxpool_grad3_same" + tag,
                     x_odd + InputNode("dy", {2, 3, 4, 4}) +
                         OpNode("y", "MaxPoolGrad", {"x", "dy"}, PoolAttrs({3, 3}, {2, 2}, "SAME")),
                     {"y"},
                     ties});
  }
  // 3x3 at stride 2, SAME on 8: padding below and right only (a padded copy).
  cases.push_back({"maxpool3_same_asymmetric", x + OpNode("y", "MaxPool", {"x"}, PoolAttrs({3, 3}, {2, 2}, "SAME"))});
  cases.push_back({"maxpool_grad3_same_asymmetric_ties",
                   x + InputNode("dy", {2, 3, 4, 4}) +
                       OpNode("y", "MaxPoolGrad", {"x", "dy"}, PoolAttrs({3, 3}, {2, 2}, "SAME")),
                   {"y"},
                   true});
  cases.push_back({"avgpool3_same", x_odd + OpNode("y", "AvgPool", {"x"}, PoolAttrs({3, 3}, {2, 2}, "SAME"))});
  cases.push_back({"avgpool3_same_asymmetric_counting_padding",
                   x + OpNode("y", "AvgPool", {"x"},
                              PoolAttrs({3, 3}, {2, 2}, "SAME") + Attr("count_padding", "b: true"))});
  cases.push_back({"avgpool_grad3_same", x_odd + InputNode("dy", {2, 3, 4, 4}) +
                                             OpNode("y", "AvgPoolGrad", {"x", "dy"}, PoolAttrs({3, 3}, {2, 2}, "SAME"))});
  return cases;
}

// MatMul's and BatchMatMul's attributes.
std::string Transposes(bool a, bool b) {
  return Attr("transpose_a", a ? "b: true" : "b: false") + Attr("transpose_b", b ? "b: true" : "b: false");
}

std::vector<OpCase> DenseCases() {
  std::vector<OpCase> cases;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    cases.push_back({absl::StrCat("matmul_ta", ta, "_tb", tb),
                     InputNode("a", ta ? std::vector<int64_t>{7, 5} : std::vector<int64_t>{5, 7}) +
                         InputNode("b", tb ? std::vector<int64_t>{3, 7} : std::vector<int64_t>{7, 3}) +
                         OpNode("y", "MatMul", {"a", "b"}, Transposes(ta, tb))});
  }
  cases.push_back({"bias_add_2d", InputNode("x", {4, 6}) + InputNode("b", {6}) + OpNode("y", "BiasAdd", {"x", "b"})});
  cases.push_back(
      {"bias_add_4d", InputNode("x", {2, 3, 4, 5}) + InputNode("b", {3}) + OpNode("y", "BiasAdd", {"x", "b"})});
  cases.push_back({"bias_add_grad_2d", InputNode("x", {300, 6}) + OpNode("y", "BiasAddGrad", {"x"})});
  cases.push_back({"bias_add_grad_4d", InputNode("x", {8, 3, 17, 5}) + OpNode("y", "BiasAddGrad", {"x"})});
  cases.push_back({"relu", InputNode("x", {1000}) + OpNode("y", "Relu", {"x"})});
  cases.push_back({"relu_grad", InputNode("dy", {1000}) + InputNode("x", {1000}) + OpNode("y", "ReluGrad", {"dy", "x"})});
  const std::string loss_inputs = InputNode("s", {6, 10}) + InputNode("labels", {6}, "DT_INT32");
  cases.push_back({"softmax_cross_entropy", loss_inputs + OpNode("y", "SoftmaxCrossEntropy", {"s", "labels"})});
  cases.push_back({"softmax_cross_entropy_grad",
                   loss_inputs + InputNode("dloss", {}) +
                       OpNode("y", "SoftmaxCrossEntropyGrad", {"s", "labels", "dloss"})});
  const std::string sgd_inputs = InputNode("p", {500}) + InputNode("g", {500}) + InputNode("lr", {}) +
                                 InputNode("v", {500});
  cases.push_back({"sgd_plain", sgd_inputs + OpNode("y", "ApplySgd", {"p", "g", "lr"}, Attr("weight_decay", "f: 0.01")) +
                                    OpNode("y1", "Identity", {"y:1"}),
                   {"y", "y1"}});
  cases.push_back({"sgd_momentum",
                   sgd_inputs + OpNode("y", "ApplySgd", {"p", "g", "lr", "v"}, Attr("momentum", "f: 0.9")) +
                       OpNode("y1", "Identity", {"y:1"}),
                   {"y", "y1"}});
  cases.push_back({"sgd_nesterov",
                   sgd_inputs + OpNode("y", "ApplySgd", {"p", "g", "lr", "v"},
                                       Attr("momentum", "f: 0.9") + Attr("nesterov", "b: true") +
                                           Attr("weight_decay", "f: 0.0005")) +
                       OpNode("y1", "Identity", {"y:1"}),
                   {"y", "y1"}});
  cases.push_back({"learning_rate_cosine",
                   OpNode("y", "LearningRate", {}, Attr("base", "f: 0.1") + Attr("schedule", "s: \"cosine\""))});
  cases.push_back({"dropout", InputNode("x", {4096}) + OpNode("y", "Dropout", {"x"}, Attr("rate", "f: 0.3")), {"y"},
                   false, 0.0f});
  cases.push_back({"gradient_scaled", InputNode("x", {100}) +
                                          OpNode("y", "Gradient", {"x"},
                                                 Attr("parameter", "s: \"w\"") + Attr("scale", "f: 0.25"))});
  cases.push_back({"flatten", InputNode("x", {2, 3, 4}) + OpNode("y", "Flatten", {"x"}), {"y"}, false, 0.0f});
  return cases;
}

// The op "y" and an Identity "y<i>" fetching each further output i.
OpCase WithOutputs(std::string name, const std::string& graph, int outputs, std::vector<std::string> positive = {},
                   bool training = true) {
  OpCase c{std::move(name), graph, {"y"}};
  for (int i = 1; i < outputs; ++i) {
    c.graph += OpNode(absl::StrCat("y", i), "Identity", {absl::StrCat("y:", i)});
    c.fetches.push_back(absl::StrCat("y", i));
  }
  c.positive = std::move(positive);
  c.training = training;
  return c;
}

// Add, Sub, Mul and Div with broadcasting, AddN, ReduceToShapeOf: the host's
// results exactly.
std::vector<OpCase> SumCases() {
  std::vector<OpCase> cases;
  struct Pair {
    std::string name;
    std::vector<int64_t> a, b;
  };
  for (const Pair& p : std::vector<Pair>{{"same", {2, 3, 4}, {2, 3, 4}},
                                         {"bias_row", {4, 6}, {6}},
                                         {"scalar", {}, {2, 3}},
                                         {"both_broadcast", {3, 1, 5}, {4, 1}},
                                         {"channel", {2, 3, 4, 5}, {1, 3, 1, 1}}}) {
    for (const std::string op : {"Add", "Sub", "Mul", "Div"}) {
      cases.push_back({absl::AsciiStrToLower(op) + "_" + p.name,
                       InputNode("a", p.a) + InputNode("b", p.b) + OpNode("y", op, {"a", "b"}),
                       {"y"},
                       false,
                       0.0f});
    }
  }
  for (int inputs : {1, 3, 10}) {  // 10: more than one launch's inputs
    std::string graph;
    std::vector<std::string> names;
    for (int i = 0; i < inputs; ++i) {
      names.push_back(absl::StrCat("x", i));
      graph += InputNode(names.back(), {7, 50});
    }
    cases.push_back({absl::StrCat("add_n_", inputs), graph + OpNode("y", "AddN", names), {"y"}, false, 0.0f});
  }
  struct Target {
    std::string name;
    std::vector<int64_t> dy, x;
  };
  for (const Target& t : std::vector<Target>{{"same", {2, 3, 4, 5}, {2, 3, 4, 5}},
                                             {"channel", {2, 3, 4, 5}, {1, 3, 1, 1}},
                                             {"channel_lower_rank", {2, 3, 4, 5}, {3, 1, 1}},
                                             {"last_axis", {2, 3, 4, 5}, {5}},
                                             {"scalar", {2, 3, 4, 5}, {}},
                                             {"two_axes", {2, 3, 4, 5}, {2, 1, 4, 1}},
                                             {"trailing_rows", {300, 6}, {6}}}) {
    cases.push_back({"reduce_to_shape_of_" + t.name,
                     InputNode("dy", t.dy) + InputNode("x", t.x) + OpNode("y", "ReduceToShapeOf", {"dy", "x"}),
                     {"y"},
                     false,
                     0.0f});
  }
  return cases;
}

// BatchNorm in both phases and its gradient; [8, 2, 32, 32] has channels
// of 8192 values, more than one reduction chunk.
std::vector<OpCase> NormCases() {
  std::vector<OpCase> cases;
  const std::string momentum = Attr("momentum", "f: 0.2");
  for (const std::vector<int64_t>& x : std::vector<std::vector<int64_t>>{{4, 3, 5, 5}, {16, 6}, {8, 2, 32, 32}}) {
    const std::string tag = absl::StrJoin(x, "x");
    const std::vector<int64_t> c = {x[1]};
    const std::string forward = InputNode("x", x) + InputNode("scale", c) + InputNode("offset", c) +
                                InputNode("mean", c) + InputNode("var", c) +
                                OpNode("y", "BatchNorm", {"x", "scale", "offset", "mean", "var"}, momentum);
    cases.push_back(WithOutputs("batch_norm_training_" + tag, forward, 5, {"var"}));
    cases.push_back(WithOutputs("batch_norm_inference_" + tag, forward, 5, {"var"}, false));
    cases.push_back(WithOutputs("batch_norm_grad_" + tag,
                                InputNode("dy", x) + InputNode("x", x) + InputNode("scale", c) + InputNode("mean", c) +
                                    InputNode("var", c) +
                                    OpNode("y", "BatchNormGrad", {"dy", "x", "scale", "mean", "var"}),
                                3, {"var"}));
  }
  return cases;
}

// GlobalAvgPool, the hinge loss and Adam.
std::vector<OpCase> ModelOpCases() {
  std::vector<OpCase> cases;
  cases.push_back(
      {"global_avg_pool", InputNode("x", {2, 3, 5, 7}) + OpNode("y", "GlobalAvgPool", {"x"}), {"y"}, false, 0.0f});
  cases.push_back(
      {"global_avg_pool_grad",
       InputNode("x", {2, 3, 5, 7}) + InputNode("dy", {2, 3}) + OpNode("y", "GlobalAvgPoolGrad", {"x", "dy"}),
       {"y"},
       false,
       0.0f});
  const std::string loss_inputs = InputNode("s", {6, 10}) + InputNode("labels", {6}, "DT_INT32");
  for (const std::string margin : {"1", "0.5"}) {
    const std::string tag = margin == "1" ? "" : "_margin_half";
    const std::string attrs = Attr("margin", "f: " + margin);
    cases.push_back({"hinge_loss" + tag, loss_inputs + OpNode("y", "HingeLoss", {"s", "labels"}, attrs)});
    cases.push_back({"hinge_loss_grad" + tag, loss_inputs + InputNode("dloss", {}) +
                                                  OpNode("y", "HingeLossGrad", {"s", "labels", "dloss"}, attrs)});
  }
  const std::string adam_inputs = InputNode("p", {500}) + InputNode("g", {500}) + InputNode("lr", {}) +
                                  InputNode("m", {500}) + InputNode("v", {500});
  for (const auto& [name, attrs] : std::vector<std::pair<std::string, std::string>>{
           {"adam", ""},
           {"adam_l2", Attr("weight_decay", "f: 0.01")},
           {"adamw", Attr("weight_decay", "f: 0.01") + Attr("decoupled", "b: true")},
           {"adam_betas", Attr("beta1", "f: 0.8") + Attr("beta2", "f: 0.99") + Attr("epsilon", "f: 0.001")}}) {
    cases.push_back(
        WithOutputs(name, adam_inputs + OpNode("y", "ApplyAdam", {"p", "g", "lr", "m", "v"}, attrs), 3, {"v"}));
  }
  return cases;
}

// BatchMatMul: equal batches with each transpose; one right-hand matrix (the
// left batch folded into rows), one left-hand matrix (a batch of stride 0),
// batches broadcast both ways (a product per matrix), no batch at all.
std::vector<OpCase> BatchMatMulCases() {
  struct Product {
    std::string name;
    std::vector<int64_t> a, b;
    bool ta, tb;
  };
  std::vector<OpCase> cases;
  for (const Product& p : std::vector<Product>{{"equal", {2, 3, 4, 5}, {2, 3, 5, 6}, false, false},
                                               {"equal_ta", {2, 3, 5, 4}, {2, 3, 5, 6}, true, false},
                                               {"equal_tb", {2, 3, 4, 5}, {2, 3, 6, 5}, false, true},
                                               {"equal_ta_tb", {2, 3, 5, 4}, {2, 3, 6, 5}, true, true},
                                               {"one_rhs", {2, 7, 5}, {5, 6}, false, false},
                                               {"one_rhs_tb", {2, 7, 5}, {6, 5}, false, true},
                                               {"one_rhs_ta", {2, 5, 7}, {5, 6}, true, false},
                                               {"one_lhs", {4, 5}, {3, 5, 6}, false, false},
                                               {"both_broadcast", {2, 1, 4, 5}, {3, 5, 6}, false, false},
                                               {"both_broadcast_ta_tb", {1, 3, 5, 4}, {2, 1, 6, 5}, true, true},
                                               {"no_batch", {4, 5}, {5, 6}, false, false}}) {
    cases.push_back({"batch_matmul_" + p.name, InputNode("a", p.a) + InputNode("b", p.b) +
                                                   OpNode("y", "BatchMatMul", {"a", "b"}, Transposes(p.ta, p.tb))});
  }
  return cases;
}

// "2x3x4_axis1", "6x10_axis_last" (test names hold no '-').
std::string AxisTag(const std::vector<int64_t>& x, int axis) {
  return absl::StrCat(absl::StrJoin(x, "x"), axis == -1 ? "_axis_last" : absl::StrCat("_axis", axis));
}

// The transformer's other ops (models/char_transformer.pbtxt) and the
// logistic loss.
std::vector<OpCase> TransformerCases() {
  std::vector<OpCase> cases;
  const auto exact = [](OpCase c, int64_t ids = 0) {
    c.tolerance = 0.0f;
    c.ids = ids;
    return c;
  };
  for (const std::string form : {"none", "tanh"}) {
    const std::string attrs = Attr("approximate", "s: \"" + form + "\"");
    cases.push_back({"gelu_" + form, InputNode("x", {1000}) + OpNode("y", "Gelu", {"x"}, attrs), {"y"}, false, 1e-5f});
    cases.push_back({"gelu_grad_" + form,
                     InputNode("dy", {1000}) + InputNode("x", {1000}) + OpNode("y", "GeluGrad", {"dy", "x"}, attrs),
                     {"y"},
                     false,
                     1e-5f});
  }
  for (const auto& [x, axis] : std::vector<std::pair<std::vector<int64_t>, int>>{
           {{6, 10}, -1}, {{2, 5, 3}, 1}, {{2, 4, 16, 16}, -1}, {{3, 4}, 0}}) {
    const std::string tag = AxisTag(x, axis);
    const std::string attrs = Attr("axis", absl::StrCat("i: ", axis));
    cases.push_back({"softmax_" + tag, InputNode("x", x) + OpNode("y", "Softmax", {"x"}, attrs), {"y"}, false, 1e-5f});
    cases.push_back({"softmax_grad_" + tag,
                     InputNode("dy", x) + InputNode("s", x) + OpNode("y", "SoftmaxGrad", {"dy", "s"}, attrs),
                     {"y"},
                     false,
                     1e-5f,
                     {"s"}});
  }
  // Widths below eight (the tail only), past it (lanes and a tail), and of
  // several dims.
  for (const auto& [x, axis] : std::vector<std::pair<std::vector<int64_t>, int>>{
           {{4, 6}, -1}, {{3, 5, 20}, -1}, {{2, 3, 4, 8}, 1}, {{2, 64}, 1}}) {
    const std::string tag = AxisTag(x, axis);
    const int at = axis < 0 ? axis + static_cast<int>(x.size()) : axis;
    const std::vector<int64_t> normalised(x.begin() + at, x.end());
    std::vector<int64_t> stats(x.begin(), x.begin() + at);
    stats.resize(x.size(), 1);
    const std::string attrs = Attr("axis", absl::StrCat("i: ", axis));
    cases.push_back(
        exact(WithOutputs("layer_norm_" + tag,
                          InputNode("x", x) + InputNode("scale", normalised) + InputNode("bias", normalised) +
                              OpNode("y", "LayerNorm", {"x", "scale", "bias"}, attrs),
                          3)));
    cases.push_back(exact(WithOutputs("layer_norm_grad_" + tag,
                                      InputNode("dy", x) + InputNode("x", x) + InputNode("scale", normalised) +
                                          InputNode("mean", stats) + InputNode("rstd", stats) +
                                          OpNode("y", "LayerNormGrad", {"dy", "x", "scale", "mean", "rstd"}, attrs),
                                      3, {"rstd"})));
  }
  const auto perm = [](std::vector<int64_t> p) { return Attr("perm", IntsValue(p)); };
  cases.push_back(
      exact({"transpose_heads", InputNode("x", {2, 3, 4, 5}) + OpNode("y", "Transpose", {"x"}, perm({0, 2, 1, 3}))}));
  cases.push_back(exact({"transpose_reversed", InputNode("x", {3, 4}) + OpNode("y", "Transpose", {"x"}, perm({}))}));
  cases.push_back(
      exact({"transpose_rotate", InputNode("x", {2, 3, 4}) + OpNode("y", "Transpose", {"x"}, perm({2, 0, 1}))}));
  cases.push_back(exact(
      {"transpose_int64", InputNode("x", {2, 3, 4}, "DT_INT64") + OpNode("y", "Transpose", {"x"}, perm({1, 0, 2}))},
      1000));
  cases.push_back(exact({"causal_mask_square", InputNode("x", {2, 3, 5, 5}) + OpNode("y", "CausalMask", {"x"})}));
  cases.push_back(exact({"causal_mask_more_keys_value0",
                         InputNode("x", {2, 3, 7}) + OpNode("y", "CausalMask", {"x"}, Attr("value", "f: 0"))}));
  // Ids in [-10, 10): negative ones, and every row picked several times.
  const std::string axis1 = Attr("axis", "i: 1");
  cases.push_back(exact(
      {"gather", InputNode("p", {10, 6}) + InputNode("ids", {4, 5}, "DT_INT32") + OpNode("y", "Gather", {"p", "ids"})},
      10));
  cases.push_back(exact({"gather_axis1_int64", InputNode("p", {3, 10, 4}) + InputNode("ids", {7}, "DT_INT64") +
                                                   OpNode("y", "Gather", {"p", "ids"}, axis1)},
                        10));
  cases.push_back(exact({"gather_grad", InputNode("dy", {4, 5, 6}) + InputNode("ids", {4, 5}, "DT_INT32") +
                                            InputNode("p", {10, 6}) + OpNode("y", "GatherGrad", {"dy", "ids", "p"})},
                        10));
  cases.push_back(exact({"gather_grad_axis1_int64", InputNode("dy", {3, 7, 4}) + InputNode("ids", {7}, "DT_INT64") +
                                                        InputNode("p", {3, 10, 4}) +
                                                        OpNode("y", "GatherGrad", {"dy", "ids", "p"}, axis1)},
                        10));
  // 300 ids into 5 rows: sums of about 60 floats each, which another order
  // of addition would round differently.
  cases.push_back(
      exact({"gather_grad_many_repeats", InputNode("dy", {300, 3}) + InputNode("ids", {300}, "DT_INT64") +
                                             InputNode("p", {5, 3}) + OpNode("y", "GatherGrad", {"dy", "ids", "p"})},
            5));
  const std::string loss_inputs = InputNode("s", {6, 10}) + InputNode("labels", {6}, "DT_INT32");
  cases.push_back({"logistic_loss", loss_inputs + OpNode("y", "LogisticLoss", {"s", "labels"})});
  cases.push_back({"logistic_loss_grad",
                   loss_inputs + InputNode("dloss", {}) + OpNode("y", "LogisticLossGrad", {"s", "labels", "dloss"})});
  return cases;
}

// Blocks cut and joined (the colocated parameter servers' layouts): concat
// along the first and an inner axis and its gradient, slices of whole rows,
// of columns and strided, their gradients, padding of one and of four axes.
std::vector<OpCase> BlockCases() {
  const auto exact = [](OpCase c) {
    c.tolerance = 0.0f;
    return c;
  };
  const auto slice = [](int64_t axis, int64_t begin, int64_t size, int64_t stride) {
    return Attr("axis", absl::StrCat("i: ", axis)) + Attr("begin", absl::StrCat("i: ", begin)) +
           Attr("size", absl::StrCat("i: ", size)) + Attr("stride", absl::StrCat("i: ", stride));
  };
  const auto slice_grad = [](int64_t axis, int64_t begin, int64_t stride) {
    return Attr("axis", absl::StrCat("i: ", axis)) + Attr("begin", absl::StrCat("i: ", begin)) +
           Attr("stride", absl::StrCat("i: ", stride));
  };
  const std::string parts = InputNode("a", {4, 3}) + InputNode("b", {4, 5}) + InputNode("c", {4, 1});
  const std::string x = InputNode("x", {4, 10});
  return {
      exact({"concat_axis1", parts + OpNode("y", "Concat", {"a", "b", "c"}, Attr("axis", "i: 1"))}),
      exact({"concat_axis0", InputNode("a", {2, 6}) + InputNode("b", {3, 6}) +
                                 OpNode("y", "Concat", {"a", "b"}, Attr("axis", "i: 0"))}),
      exact({"slice_rows", x + OpNode("y", "Slice", {"x"}, slice(0, 1, 2, 1))}),
      exact({"slice_columns", x + OpNode("y", "Slice", {"x"}, slice(1, 3, 4, 1))}),
      exact({"slice_strided", InputNode("x", {2, 9, 3}) + OpNode("y", "Slice", {"x"}, slice(1, 1, 4, 2))}),
      exact({"slice_like", InputNode("dy", {4, 10}) + InputNode("x", {4, 4}) +
                               OpNode("y", "SliceLike", {"dy", "x"}, Attr("axis", "i: 1") + Attr("begin", "i: 3"))}),
      exact({"slice_grad_columns",
             InputNode("dy", {4, 4}) + x + OpNode("y", "SliceGrad", {"dy", "x"}, slice_grad(1, 3, 1))}),
      exact({"slice_grad_strided", InputNode("dy", {2, 4, 3}) + InputNode("x", {2, 9, 3}) +
                                       OpNode("y", "SliceGrad", {"dy", "x"}, slice_grad(1, 1, 2))}),
      exact({"pad_1d", InputNode("x", {7}) + OpNode("y", "Pad", {"x"}, Attr("pads", IntsValue({0, 5})))}),
      exact({"pad_4d_value", InputNode("x", {2, 3, 4, 5}) +
                                 OpNode("y", "Pad", {"x"},
                                        Attr("pads", IntsValue({0, 1, 2, 1, 1, 0, 1, 2})) + Attr("value", "f: -0.5"))}),
      exact({"pad_grad_4d", InputNode("dy", {3, 4, 7, 8}) + InputNode("x", {2, 3, 4, 5}) +
                                OpNode("y", "PadGrad", {"dy", "x"}, Attr("pads", IntsValue({0, 1, 2, 1, 1, 0, 1, 2})))}),
  };
}

std::vector<OpCase> AllCases() {
  std::vector<OpCase> all = DenseCases();
  for (auto more :
       {ConvCases(), PoolCases(), SumCases(), NormCases(), ModelOpCases(), BatchMatMulCases(), TransformerCases(),
        BlockCases()}) {
    all.insert(all.end(), more.begin(), more.end());
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Ops, GpuKernelTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return info.param.name; });

// Every case's graph runs on the host, and its placed form has a GPU kernel
// for the op: what the GPU is compared against exists (checked without a GPU).
TEST(GpuKernelCasesCoverage, EveryCaseRunsOnTheHostAndHasAGpuKernel) {
  for (const OpCase& c : AllCases()) {
    SCOPED_TRACE(c.name);
    auto host = Evaluate(c, false);
    EXPECT_TRUE(host.ok()) << host.status();
    auto graph = Build(c, true);
    ASSERT_TRUE(graph.ok()) << graph.status();
    const Node* y = (*graph)->FindNode("y");
    ASSERT_NE(y, nullptr);
    EXPECT_EQ(y->def().device(), "cuda:0");
    auto kernel = KernelRegistry::Global().Create(**graph, *y, kGpu);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
  }
}

// An id outside the table fails the run with the host's error: the GPU's
// check raises it on the node's stream. The feed's -100 at position 1 is
// outside a table of 10 rows.
TEST(GpuKernelErrors, AnIdOutsideTheTableIsTheHostsError) {
  const std::string ids = InputNode("ids", {8}, "DT_INT32");
  const std::vector<OpCase> cases = {{"gather", InputNode("p", {10, 6}) + ids + OpNode("y", "Gather", {"p", "ids"})},
                                     {"gather_grad", InputNode("dy", {8, 6}) + ids + InputNode("p", {10, 6}) +
                                                         OpNode("y", "GatherGrad", {"dy", "ids", "p"})}};
  const std::string expected = "node 'y': index -100 at position 1 is outside the table's 10 rows";
  // The host's message (checked without a GPU too), then the GPU's.
  for (bool on_gpu : {false, true}) {
    if (on_gpu && !testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
    for (const OpCase& c : cases) {
      SCOPED_TRACE(c.name + (on_gpu ? " on cuda" : " on the host"));
      auto result = Evaluate(c, on_gpu);
      ASSERT_FALSE(result.ok());
      EXPECT_NE(result.status().message().find(expected), absl::string_view::npos) << result.status();
    }
  }
}

}  // namespace
}  // namespace nereid
