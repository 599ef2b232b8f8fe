// One test per kind of bad input: each checks that loading fails with a clear
// message that names the file, the line, the node and the op.

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace ::nereid::testing;  // NOLINT

const std::string kX = InputNode("x", {-1, 784});
const std::string kW = ParamNode("w", {784, 10});

TEST(ValidationTest, ValidGraphLoads) {
  auto graph = LoadText(kX + kW + OpNode("y", "MatMul", {"x", "w"}));
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->FindNode("y")->outputs()[0].shape.ToString(), "[?,10]");
}

// The 1-based line on which text appended after `prefix` starts.
int LineAfter(const std::string& prefix) { return 1 + static_cast<int>(std::count(prefix.begin(), prefix.end(), '\n')); }

TEST(ValidationTest, UnknownOpSuggestsTheNearestName) {
  std::string error = LoadError(kX + kW + OpNode("y", "Matmul", {"x", "w"}));
  EXPECT_THAT(error, AllOf(HasSubstr(absl::StrCat("test.pbtxt:", LineAfter(kX + kW), ":1: node 'y' (Matmul)")),
                           HasSubstr("unknown op 'Matmul'"), HasSubstr("did you mean 'MatMul'?")));
}

TEST(ValidationTest, UnknownOpFarFromAnyListsKnownOps) {
  std::string error = LoadError(kX + OpNode("y", "Frobnicate", {"x"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (Frobnicate)"), HasSubstr("known ops:"), HasSubstr("Conv2D")));
}

TEST(ValidationTest, WrongArity) {
  std::string error = LoadError(kX + OpNode("y", "MatMul", {"x"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (MatMul)"), HasSubstr("takes 2 input(s) (a, b), got 1")));
  error = LoadError(kX + OpNode("r", "Relu", {"x", "x"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'r' (Relu)"), HasSubstr("takes 1 input(s) (x), got 2")));
}

TEST(ValidationTest, VariadicArityHasAMinimum) {
  std::string error = LoadError(kX + OpNode("c", "Concat", {}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'c' (Concat)"), HasSubstr("at least 1 input(s) (values...)")));
}

TEST(ValidationTest, UnknownAttribute) {
  std::string error = LoadError(kX + kW + OpNode("y", "MatMul", {"x", "w"}, Attr("transpose_c", "b: true")));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (MatMul)"), HasSubstr("unknown attribute 'transpose_c'"),
                           HasSubstr("did you mean 'transpose_a'?")));
}

TEST(ValidationTest, MistypedAttribute) {
  std::string error = LoadError(kX + kW + OpNode("y", "MatMul", {"x", "w"}, Attr("transpose_a", "i: 1")));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (MatMul)"), HasSubstr("attribute 'transpose_a' must be bool, got int")));
}

TEST(ValidationTest, MistypedListAttribute) {
  std::string g = InputNode("x", {-1, 3, 8, 8}) + ParamNode("f", {4, 3, 3, 3}) +
                  OpNode("c", "Conv2D", {"x", "f"}, Attr("strides", "list { s: \"1\" }"));
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'c' (Conv2D)"),
                                  HasSubstr("attribute 'strides' must be list(int), got list(string)")));
}

TEST(ValidationTest, EnumAttributeOutOfRange) {
  std::string g = InputNode("x", {-1, 3, 8, 8}) + ParamNode("f", {4, 3, 3, 3}) +
                  OpNode("c", "Conv2D", {"x", "f"}, Attr("padding", "s: \"FULL\""));
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'c' (Conv2D)"), HasSubstr("\"FULL\"; allowed: VALID, SAME, EXPLICIT")));
}

TEST(ValidationTest, MissingRequiredAttribute) {
  std::string error = LoadError(OpNode("x", "Input"));
  EXPECT_THAT(error, AllOf(HasSubstr("test.pbtxt:1:1: node 'x' (Input)"),
                           HasSubstr("missing required attribute 'shape'")));
}

TEST(ValidationTest, DuplicateNodeName) {
  std::string error = LoadError(kX + InputNode("x", {-1, 10}));
  EXPECT_THAT(error, AllOf(HasSubstr(absl::StrCat("test.pbtxt:", LineAfter(kX), ":1: node 'x' (Input)")),
                           HasSubstr("duplicate node name 'x'"),
                           HasSubstr("first defined at line 1")));
}

TEST(ValidationTest, InputNamesMissingNode) {
  std::string error = LoadError(kX + OpNode("y", "MatMul", {"x", "weights"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (MatMul)"),
                           HasSubstr("input 'weights' names node 'weights', which does not exist")));
}

TEST(ValidationTest, InputNamesMissingPort) {
  std::string error = LoadError(kX + kW + OpNode("y", "MatMul", {"x:3", "w"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (MatMul)"), HasSubstr("names output 3 of node 'x'"),
                           HasSubstr("Input has 1 output(s)")));
}

TEST(ValidationTest, MalformedPort) {
  std::string error = LoadError(kX + OpNode("r", "Relu", {"x:one"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'r' (Relu)"), HasSubstr("bad port 'one'")));
  error = LoadError(kX + OpNode("r", "Relu", {"x:-1"}));
  EXPECT_THAT(error, HasSubstr("bad port '-1'"));
}

TEST(ValidationTest, DataInputAfterControlInput) {
  std::string error = LoadError(kX + OpNode("r", "Relu", {"^x", "x"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'r' (Relu)"), HasSubstr("comes after a control input")));
}

TEST(ValidationTest, CycleIsNamed) {
  std::string g = kX + OpNode("a", "Add", {"x", "c"}) + OpNode("b", "Relu", {"a"}) + OpNode("c", "Relu", {"b"});
  std::string error = LoadError(g);
  EXPECT_THAT(error, AllOf(HasSubstr("cycle that does not pass through a Feedback node"), HasSubstr("a -> b -> c -> a")));
}

TEST(ValidationTest, ControlEdgeCycleIsRefused) {
  std::string g = kX + OpNode("a", "Relu", {"x", "^b"}) + OpNode("b", "Relu", {"a"});
  EXPECT_THAT(LoadError(g), HasSubstr("cycle"));
}

TEST(ValidationTest, CycleThroughFeedbackIsAllowed) {
  std::string g = "loop { name: \"train\" }\n" + InputNode("x", {4}) +
                  OpNode("state", "Feedback", {"next"},
                         Attr("loop", "s: \"train\"") + Attr("shape", ShapeValue({4}))) +
                  OpNode("next", "Add", {"x", "state"});
  auto graph = LoadText(g);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->FindNode("next")->outputs()[0].shape.ToString(), "[4]");
}

TEST(ValidationTest, FeedbackShapeMustMatchItsInput) {
  std::string g = "loop { name: \"train\" }\n" + InputNode("x", {4}) +
                  OpNode("state", "Feedback", {"y"}, Attr("loop", "s: \"train\"") + Attr("shape", ShapeValue({4}))) +
                  OpNode("next", "Add", {"x", "state"}) + OpNode("y", "Concat", {"next", "next"}, Attr("axis", "i: 0"));
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'state' (Feedback)"), HasSubstr("is [8] float32 but the feedback declares [4]")));
}

TEST(ValidationTest, FeedbackNamesAnUndeclaredLoop) {
  std::string g = InputNode("x", {4}) +
                  OpNode("state", "Feedback", {"x"}, Attr("loop", "s: \"train\"") + Attr("shape", ShapeValue({4})));
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'state' (Feedback)"), HasSubstr("loop scope 'train' is not declared")));
}

TEST(ValidationTest, NodePlacedInAnUndeclaredLoop) {
  std::string g = InputNode("x", {4}) + "node { name: \"r\" op: \"Relu\" input: \"x\" loop: \"train\" }\n";
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'r' (Relu)"), HasSubstr("loop scope 'train' is not declared")));
}

// The format beyond nodes: an empty graph, graph attributes of the wrong type
// or naming missing nodes, loop scopes listing the wrong nodes, placement on
// ranks or roles the plan lacks.
TEST(ValidationTest, AnEmptyGraphIsRefused) {
  EXPECT_THAT(LoadError(""), HasSubstr("the graph has no nodes"));
}

TEST(ValidationTest, GraphAttributesAreChecked) {
  const std::string y = OpNode("y", "MatMul", {"x", "w"});
  EXPECT_THAT(LoadError("attr { key: \"num_classes\" value { s: \"two\" } }\n" + kX + kW + y),
              HasSubstr("graph attribute 'num_classes' must be an integer (i)"));
  EXPECT_THAT(LoadError("attr { key: \"num_classes\" value { i: 0 } }\n" + kX + kW + y),
              HasSubstr("graph attribute 'num_classes' is 0; it must be at least 1"));
  EXPECT_THAT(LoadError("attr { key: \"loss\" value { s: \"nope\" } }\n" + kX + kW + y),
              HasSubstr("graph attribute 'loss' names node 'nope', which does not exist"));
  EXPECT_THAT(LoadError("attr { key: \"logits\" value { i: 3 } }\n" + kX + kW + y),
              HasSubstr("graph attribute 'logits' must be a string (s)"));
  // A plan's records are checked; what older versions recorded as attributes
  // is refused, not misread.
  EXPECT_THAT(LoadError("records { group { name: \"mp\" size: 0 } }\n" + kX + kW + y),
              HasSubstr("group 'mp' has size 0"));
  EXPECT_THAT(LoadError("records { workers: -2 }\n" + kX + kW + y),
              HasSubstr("the plan's records.workers is -2"));
  EXPECT_THAT(LoadError("records { pipeline_width: 65 }\n" + kX + kW + y),
              HasSubstr("records.pipeline_width is 65; at most 64"));
  EXPECT_THAT(LoadError("attr { key: \"groups\" value { s: \"mp=blocks:2\" } }\n" + kX + kW + y),
              HasSubstr("graph attribute 'groups' is how an older Nereid recorded a plan"));
  // Attributes Nereid does not read are kept (a tool's own notes).
  EXPECT_TRUE(LoadText("attr { key: \"author\" value { s: \"me\" } }\n" + kX + kW + y).ok());
}

TEST(ValidationTest, LoopScopesListTheRightNodes) {
  std::string g = "loop { name: \"train\" feedback: \"x\" }\n" + InputNode("x", {4});
  EXPECT_THAT(LoadError(g), HasSubstr("lists 'x' as a feedback, but it is a Input, not a Feedback"));
  g = "loop { name: \"train\" max_in_flight: 1000 }\n" + InputNode("x", {4});
  EXPECT_THAT(LoadError(g), HasSubstr("has max_in_flight 1000; it must be in [1, 64]"));
}

TEST(ValidationTest, PlacementNamesRanksAndRolesThePlanHas) {
  const std::string workers = "records { workers: 2 }\n";
  EXPECT_THAT(LoadError(workers + InputNode("x", {4}) + "node { name: \"r\" op: \"Relu\" input: \"x\" worker: 2 }\n"),
              AllOf(HasSubstr("node 'r' (Relu)"), HasSubstr("runs on rank 2 but the plan has 2 workers")));
  EXPECT_THAT(LoadError(workers + InputNode("x", {4}) + "node { name: \"r\" op: \"Relu\" input: \"x\" role: \"mp\" }\n"),
              HasSubstr("runs on role 'mp', which the plan's groups do not declare"));
  EXPECT_THAT(LoadError(InputNode("x", {4}) + "node { name: \"r\" op: \"Relu\" input: \"x\" worker: 0 role: \"mp\" }\n"),
              HasSubstr("names both a rank (worker) and a role"));
}

// The place pass writes "cpu:0", "sim:0" and "cuda:0"; other names are refused.
TEST(ValidationTest, DevicesAreKnownOrRefused) {
  auto relu_on = [](const std::string& device) {
    return InputNode("x", {4}) + "node { name: \"r\" op: \"Relu\" input: \"x\" device: \"" + device + "\" }\n";
  };
  for (const char* device : {"cpu:0", "sim:0", "sim:12", "cuda:1", "sim"}) {
    EXPECT_TRUE(LoadText(relu_on(device)).ok()) << device;
  }
  for (const char* device : {"tpu:0", "sim:x", "sim:", "simulator:0"}) {
    EXPECT_THAT(LoadError(relu_on(device)), AllOf(HasSubstr("node 'r' (Relu)"),
                                                  HasSubstr(absl::StrCat("names device '", device, "'"))));
  }
  EXPECT_THAT(LoadError("records { placement { device: \"tpu:0\" } }\n" + InputNode("x", {4})),
              HasSubstr("records.placement.device is 'tpu:0'"));
  EXPECT_THAT(LoadError("records { placement { device: \"sim:0\" copies: -1 } }\n" + InputNode("x", {4})),
              HasSubstr("records.placement.copies is -1"));
}

TEST(ValidationTest, NegativeDimension) {
  std::string error = LoadError(InputNode("x", {-1, -3}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'x' (Input)"), HasSubstr("negative dimension -3")));
}

TEST(ValidationTest, OverflowingDimensions) {
  std::string error = LoadError(ParamNode("w", {int64_t{1} << 40, int64_t{1} << 40}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'w' (Parameter)"), HasSubstr("refusing it before allocating")));
}

TEST(ValidationTest, AbsurdSizeIsRefused) {
  std::string error = LoadError(ParamNode("w", {100000, 100000, 100}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'w' (Parameter)"), HasSubstr("more than 4294967296 elements")));
}

TEST(ValidationTest, AbsurdInferredSizeIsRefused) {
  // Each input is fine; the product is not.
  std::string g = InputNode("a", {100000, 1}) + InputNode("b", {1, 100000}) + OpNode("y", "Mul", {"a", "b"});
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'y' (Mul)"), HasSubstr("elements")));
}

TEST(ValidationTest, ShapeMismatchNamesBothShapes) {
  std::string error = LoadError(kX + ParamNode("w", {500, 10}) + OpNode("y", "MatMul", {"x", "w"}));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'y' (MatMul)"), HasSubstr("input 'a' [?,784]"),
                           HasSubstr("input 'b' [500,10]"), HasSubstr("784 vs 500")));
}

TEST(ValidationTest, TensorDataMustMatchItsShape) {
  std::string value = "tensor { dtype: DT_FLOAT shape { dim: 2 dim: 2 } float_val: 1 float_val: 2 float_val: 3 }";
  std::string error = LoadError(OpNode("c", "Const", {}, Attr("value", value)));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'c' (Const)"), HasSubstr("tensor data has 3 values but its shape [2,2] holds 4")));
}

TEST(ValidationTest, InitialiserShapeMustMatchParameter) {
  std::string init = "tensor { dtype: DT_FLOAT shape { dim: 3 } init { kind: \"zeros\" } }";
  std::string error = LoadError(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4})) + Attr("init", init)));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'w' (Parameter)"), HasSubstr("tensor shape [3] does not match the declared shape [4]")));
}

TEST(ValidationTest, UnknownInitialiser) {
  std::string init = "tensor { dtype: DT_FLOAT init { kind: \"xavier\" } }";
  std::string error = LoadError(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4})) + Attr("init", init)));
  EXPECT_THAT(error, AllOf(HasSubstr("node 'w' (Parameter)"), HasSubstr("unknown initialiser 'xavier'")));
}

TEST(ValidationTest, WrongInputDtype) {
  std::string g = InputNode("logits", {-1, 10}) + InputNode("labels", {-1}) +
                  OpNode("loss", "SoftmaxCrossEntropy", {"logits", "labels"});
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'loss' (SoftmaxCrossEntropy)"),
                                  HasSubstr("input 'labels' from 'labels' is float32; SoftmaxCrossEntropy accepts int32, int64")));
}

TEST(ValidationTest, NegativePlacement) {
  std::string g = "node { name: \"x\" op: \"Input\" worker: -2 " + Attr("shape", ShapeValue({1})) + "}\n";
  EXPECT_THAT(LoadError(g), AllOf(HasSubstr("node 'x' (Input)"), HasSubstr("worker -2 is negative")));
}

TEST(ValidationTest, NodeWithoutName) {
  EXPECT_THAT(LoadError("node { op: \"Relu\" }\n"), HasSubstr("node has no name"));
}

}  // namespace
}  // namespace nereid
