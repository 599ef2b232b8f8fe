// Shape inference for every registered op, and the registry's own contract:
// every op has a shape function, a cost function, and a case in this file.

#include <cstdint>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/op_registry.h"
#include "ops/shape_inference.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace ::nereid::testing;  // NOLINT

// Ops exercised by a test below; RegistryTest checks the registry has no op
// missing from this set.
std::set<std::string>& Covered() {
  static std::set<std::string> ops;
  return ops;
}

// Loads `graph` and returns node `name`'s output as "[shape] dtype".
std::string OutputOf(const std::string& graph, const std::string& name) {
  auto g = LoadText(graph);
  if (!g.ok()) return std::string(g.status().message());
  const Node* node = (*g)->FindNode(name);
  Covered().insert(node->op());
  const ShapeAndType& out = node->outputs()[0];
  return absl::StrCat(out.shape.ToString(), " ", DataTypeName(out.dtype));
}

const std::string kImage = InputNode("x", {-1, 3, 32, 32});

TEST(ShapeTest, Input) { EXPECT_EQ(OutputOf(kImage, "x"), "[?,3,32,32] float32"); }

TEST(ShapeTest, Parameter) { EXPECT_EQ(OutputOf(ParamNode("w", {3, 4}), "w"), "[3,4] float32"); }

TEST(ShapeTest, ParameterMustBeFullyKnown) {
  EXPECT_THAT(LoadError(ParamNode("w", {-1, 4})), HasSubstr("a parameter's shape must be fully known"));
}

TEST(ShapeTest, Const) {
  std::string value = "tensor { dtype: DT_INT64 shape { dim: 2 } int64_val: 1 int64_val: 2 }";
  EXPECT_EQ(OutputOf(OpNode("c", "Const", {}, Attr("value", value)), "c"), "[2] int64");
}

TEST(ShapeTest, ConstFromRawData) {
  std::string value = "tensor { dtype: DT_FLOAT shape { dim: 2 } raw_data: \"\\000\\000\\200?\\000\\000\\000@\" }";
  EXPECT_EQ(OutputOf(OpNode("c", "Const", {}, Attr("value", value)), "c"), "[2] float32");
  std::string odd = "tensor { dtype: DT_FLOAT shape { dim: 2 } raw_data: \"\\000\\000\\200\" }";
  EXPECT_THAT(LoadError(OpNode("c", "Const", {}, Attr("value", odd))), HasSubstr("not a whole number of float32"));
}

TEST(ShapeTest, MatMul) {
  std::string g = InputNode("x", {-1, 784}) + ParamNode("w", {784, 10}) + ParamNode("t", {10, 784});
  EXPECT_EQ(OutputOf(g + OpNode("y", "MatMul", {"x", "w"}), "y"), "[?,10] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "MatMul", {"x", "t"}, Attr("transpose_b", "b: true")), "y"), "[?,10] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "MatMul", {"x", "t"})), HasSubstr("784 vs 10"));
}

TEST(ShapeTest, MatMulRank) {
  EXPECT_THAT(LoadError(kImage + ParamNode("w", {3, 4}) + OpNode("y", "MatMul", {"x", "w"})),
              HasSubstr("input 'a' [?,3,32,32] must have rank 2"));
}

TEST(ShapeTest, BiasAdd) {
  std::string g = kImage + ParamNode("b", {3});
  EXPECT_EQ(OutputOf(g + OpNode("y", "BiasAdd", {"x", "b"}), "y"), "[?,3,32,32] float32");
  EXPECT_THAT(LoadError(kImage + ParamNode("b", {4}) + OpNode("y", "BiasAdd", {"x", "b"})),
              HasSubstr("input 'bias' [4] does not match dimension 1 of input 'x' [?,3,32,32]"));
}

TEST(ShapeTest, Conv2D) {
  std::string g = kImage + ParamNode("f", {16, 3, 3, 3});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2D", {"x", "f"}), "y"), "[?,16,30,30] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("padding", "s: \"SAME\"")), "y"),
            "[?,16,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2D", {"x", "f"},
                                Attr("padding", "s: \"EXPLICIT\"") + Attr("pads", IntsValue({1, 1, 1, 1})) +
                                    Attr("strides", IntsValue({2, 2}))),
                     "y"),
            "[?,16,16,16] float32");
  // Dilation 2 makes the 3x3 window 5 wide.
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("dilations", IntsValue({2, 2}))), "y"),
            "[?,16,28,28] float32");
}

TEST(ShapeTest, Conv2DGroups) {
  std::string g = InputNode("x", {-1, 8, 10, 10}) + ParamNode("f", {8, 2, 3, 3});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("groups", "i: 4")), "y"), "[?,8,8,8] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "Conv2D", {"x", "f"})), HasSubstr("channels disagree"));
}

TEST(ShapeTest, Conv2DErrors) {
  std::string g = kImage + ParamNode("f", {16, 3, 3, 3});
  EXPECT_THAT(LoadError(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("strides", IntsValue({0, 1})))),
              HasSubstr("'strides' must be two positive ints"));
  EXPECT_THAT(LoadError(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("padding", "s: \"EXPLICIT\""))),
              HasSubstr("padding EXPLICIT needs 'pads'"));
  EXPECT_THAT(LoadError(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("pads", IntsValue({1, 1, 1, 1})))),
              HasSubstr("only used with padding EXPLICIT"));
  std::string tiny = InputNode("x", {-1, 3, 2, 2}) + ParamNode("f", {16, 3, 3, 3});
  EXPECT_THAT(LoadError(tiny + OpNode("y", "Conv2D", {"x", "f"})),
              HasSubstr("the 3-wide window does not fit the height of input 'x' [?,3,2,2]"));
}

TEST(ShapeTest, HugeWindowValuesAreRefused) {
  std::string same = Attr("padding", "s: \"SAME\"");
  EXPECT_THAT(LoadError(kImage + OpNode("p", "MaxPool", {"x"}, Attr("ksize", IntsValue({int64_t{1} << 40, 2})) + same)),
              HasSubstr("'ksize' must be two positive ints (height, width) of at most 2147483648"));
  std::string g = kImage + ParamNode("f", {16, 3, 3, 3});
  std::string pads = Attr("padding", "s: \"EXPLICIT\"") + Attr("pads", IntsValue({1, 1, INT64_MAX, 1}));
  EXPECT_THAT(LoadError(g + OpNode("y", "Conv2D", {"x", "f"}, pads)), HasSubstr("of at most 2147483648"));
  EXPECT_THAT(LoadError(g + OpNode("y", "Conv2D", {"x", "f"}, Attr("dilations", IntsValue({INT64_MAX, 1})))),
              HasSubstr("'dilations' must be two positive ints"));
}

TEST(ShapeTest, FlopCountsSaturateInsteadOfOverflowing) {
  // A large but legal convolution: 2^31-element output, 2^31-element filter.
  std::string g = InputNode("x", {1, 2, 1, 1}) + ParamNode("f", {2, 2, 1 << 15, 1 << 15}) +
                  OpNode("y", "Conv2D", {"x", "f"},
                         Attr("padding", "s: \"EXPLICIT\"") + Attr("pads", IntsValue({1 << 15, 1 << 15, 1 << 15, 1 << 15})));
  auto graph = LoadText(g);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_GT(FlopsPerSample(*(*graph)->FindNode("y")), 0);
}

TEST(ShapeTest, MaxPool) {
  std::string attrs = Attr("ksize", IntsValue({2, 2})) + Attr("strides", IntsValue({2, 2}));
  EXPECT_EQ(OutputOf(kImage + OpNode("p", "MaxPool", {"x"}, attrs), "p"), "[?,3,16,16] float32");
  EXPECT_THAT(LoadError(kImage + OpNode("p", "MaxPool", {"x"})), HasSubstr("missing required attribute 'ksize'"));
}

TEST(ShapeTest, AvgPool) {
  std::string attrs = Attr("ksize", IntsValue({3, 3})) + Attr("strides", IntsValue({1, 1})) +
                      Attr("padding", "s: \"SAME\"");
  EXPECT_EQ(OutputOf(kImage + OpNode("p", "AvgPool", {"x"}, attrs), "p"), "[?,3,32,32] float32");
}

TEST(ShapeTest, GlobalAvgPool) {
  EXPECT_EQ(OutputOf(kImage + OpNode("p", "GlobalAvgPool", {"x"}), "p"), "[?,3] float32");
}

TEST(ShapeTest, Activations) {
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Softmax", "Identity", "Dropout"}) {
    EXPECT_EQ(OutputOf(kImage + OpNode("y", op, {"x"}), "y"), "[?,3,32,32] float32") << op;
  }
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Softmax", {"x"}, Attr("axis", "i: 4"))), HasSubstr("'axis' 4 is out of range"));
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Dropout", {"x"}, Attr("rate", "f: 1.0"))), HasSubstr("'rate' must be in [0, 1)"));
}

TEST(ShapeTest, Losses) {
  std::string g = InputNode("s", {-1, 10}) + InputNode("l", {-1}, "DT_INT64");
  for (const char* op : {"SoftmaxCrossEntropy", "HingeLoss", "LogisticLoss"}) {
    EXPECT_EQ(OutputOf(g + OpNode("loss", op, {"s", "l"}), "loss"), "[] float32") << op;
  }
  std::string seq = InputNode("s", {-1, 16, 50}) + InputNode("l", {-1, 16}, "DT_INT64") + InputNode("l1", {-1}, "DT_INT64");
  EXPECT_EQ(OutputOf(seq + OpNode("loss", "SoftmaxCrossEntropy", {"s", "l"}), "loss"), "[] float32");
  EXPECT_THAT(LoadError(seq + OpNode("loss", "SoftmaxCrossEntropy", {"s", "l1"})), HasSubstr("must have rank 2"));
  std::string mismatch = InputNode("s", {8, 10}) + InputNode("l", {4}, "DT_INT32");
  EXPECT_THAT(LoadError(mismatch + OpNode("loss", "HingeLoss", {"s", "l"})),
              HasSubstr("batch sizes disagree: input 'logits' [8,10] vs input 'labels' [4]"));
}

TEST(ShapeTest, AddMulAndDivBroadcast) {
  std::string g = kImage + ParamNode("c", {3, 1, 1});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Add", {"x", "c"}), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Mul", {"c", "x"}), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + ParamNode("w", {1}) + OpNode("y", "Div", {"c", "w"}), "y"), "[3,1,1] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "UnitVector", {"c"}), "y"), "[3,1,1] float32");
  std::string bad = kImage + ParamNode("c", {4, 1, 1});
  EXPECT_THAT(LoadError(bad + OpNode("y", "Add", {"x", "c"})),
              HasSubstr("shapes [?,3,32,32] and [4,1,1] do not broadcast"));
}

TEST(ShapeTest, Flatten) {
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Flatten", {"x"}), "y"), "[?,3072] float32");
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Flatten", {"x"}, Attr("axis", "i: 2")), "y"), "[?,3,1024] float32");
}

TEST(ShapeTest, Reshape) {
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Reshape", {"x"}, Attr("shape", IntsValue({-1, 96, 32}))), "y"),
            "[?,96,32] float32");
  std::string fixed = InputNode("x", {4, 6});
  EXPECT_EQ(OutputOf(fixed + OpNode("y", "Reshape", {"x"}, Attr("shape", IntsValue({3, -1}))), "y"), "[3,8] float32");
  EXPECT_THAT(LoadError(fixed + OpNode("y", "Reshape", {"x"}, Attr("shape", IntsValue({5, 5})))),
              HasSubstr("cannot reshape input 'x' [4,6] (24 elements) to [5,5] (25 elements)"));
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Reshape", {"x"}, Attr("shape", IntsValue({3072})))),
              HasSubstr("needs one -1"));
  EXPECT_THAT(LoadError(fixed + OpNode("y", "Reshape", {"x"}, Attr("shape", IntsValue({-1, -1})))),
              HasSubstr("more than one -1"));
}

TEST(ShapeTest, Slice) {
  std::string g = kImage + InputNode("v", {10});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Slice", {"v"}, Attr("begin", "i: 4") + Attr("size", "i: 6")), "y"), "[6] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Slice", {"x"}, Attr("axis", "i: 1") + Attr("begin", "i: 1") + Attr("size", "i: 2")),
                     "y"),
            "[?,2,32,32] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "Slice", {"v"}, Attr("begin", "i: 4") + Attr("size", "i: 7"))),
              HasSubstr("slice of 7 elements from 4 in steps of 1 is not inside dimension 0"));
  EXPECT_EQ(OutputOf(g + OpNode("y", "Slice", {"v"}, Attr("begin", "i: 1") + Attr("size", "i: 5") + Attr("stride", "i: 2")),
                     "y"),
            "[5] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "Slice", {"v"}, Attr("begin", "i: 1") + Attr("size", "i: 5") +
                                                            Attr("stride", "i: 3"))),
              HasSubstr("in steps of 3 is not inside"));
  EXPECT_THAT(LoadError(g + OpNode("y", "Slice", {"v"}, Attr("begin", "i: 1") + Attr("size", "i: 2") +
                                                            Attr("stride", "i: 0"))),
              HasSubstr("'stride' must be in [1, 2^31]"));
}

TEST(ShapeTest, ElementwiseMath) {
  for (const char* op : {"Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Erf", "Gelu", "Clip", "HardSigmoid", "HardSwish",
                         "LogSoftmax"}) {
    EXPECT_EQ(OutputOf(kImage + OpNode("y", op, {"x"}), "y"), "[?,3,32,32] float32") << op;
  }
  std::string g = kImage + ParamNode("c", {3, 1, 1});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Sub", {"x", "c"}), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Pow", {"c", "x"}), "y"), "[?,3,32,32] float32");
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Gelu", {"x"}, Attr("approximate", "s: \"fast\""))),
              HasSubstr("approximate"));
}

TEST(ShapeTest, Pad) {
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Pad", {"x"}, Attr("pads", IntsValue({0, 0, 1, 2, 0, 0, 3, 4}))), "y"),
            "[?,3,36,38] float32");
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Pad", {"x"}, Attr("pads", IntsValue({1, 1})))), HasSubstr("needs 8"));
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Pad", {"x"}, Attr("pads", IntsValue({0, 0, -1, 0, 0, 0, 0, 0})))),
              HasSubstr("must hold values in [0, 2^31]"));
}

TEST(ShapeTest, Transpose) {
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Transpose", {"x"}, Attr("perm", IntsValue({0, 2, 3, 1}))), "y"),
            "[?,32,32,3] float32");
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Transpose", {"x"}), "y"), "[32,32,3,?] float32");
  EXPECT_THAT(LoadError(kImage + OpNode("y", "Transpose", {"x"}, Attr("perm", IntsValue({0, 1, 1, 2})))),
              HasSubstr("is not a permutation of 0..3"));
}

TEST(ShapeTest, BatchMatMul) {
  std::string g = InputNode("a", {-1, 4, 5, 6}) + ParamNode("w", {6, 7}) + ParamNode("b", {3, 1, 6, 2}) +
                  ParamNode("v", {6}) + ParamNode("c", {3, 2, 6, 2});
  EXPECT_EQ(OutputOf(g + OpNode("y", "BatchMatMul", {"a", "w"}), "y"), "[?,4,5,7] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "BatchMatMul", {"b", "w"}, Attr("transpose_a", "b: true")), "y"),
            "[3,1,2,7] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "BatchMatMul", {"a", "c"})), HasSubstr("do not broadcast"));
  EXPECT_THAT(LoadError(g + OpNode("y", "BatchMatMul", {"w", "w"})), HasSubstr("inner dimensions disagree"));
  EXPECT_THAT(LoadError(g + OpNode("y", "BatchMatMul", {"a", "v"})), HasSubstr("must have rank >= 2"));
}

TEST(ShapeTest, Gather) {
  std::string g = ParamNode("table", {10, 4}) + InputNode("ids", {-1, 7}, "DT_INT64") + InputNode("f", {-1, 7});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Gather", {"table", "ids"}), "y"), "[?,7,4] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Gather", {"table", "ids"}, Attr("axis", "i: 1")), "y"), "[10,?,7] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "Gather", {"table", "f"})), HasSubstr("indices"));
  EXPECT_THAT(LoadError(g + OpNode("y", "Gather", {"table", "ids"}, Attr("axis", "i: 2"))), HasSubstr("out of range"));
}

TEST(ShapeTest, WhereExpandCast) {
  std::string g = InputNode("x", {-1, 4, 8}) + ParamNode("mask", {4, 8}) + ParamNode("fill", {1});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Where", {"mask", "fill", "x"}), "y"), "[?,4,8] float32");
  EXPECT_THAT(LoadError(g + ParamNode("bad", {3}) + OpNode("y", "Where", {"bad", "fill", "x"})),
              HasSubstr("do not broadcast"));
  EXPECT_EQ(OutputOf(g + ParamNode("row", {1, 8}) + OpNode("y", "Expand", {"row"}, Attr("shape", IntsValue({5, 8}))),
                     "y"),
            "[5,8] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Expand", {"x"}, Attr("shape", IntsValue({-1, 1, 8}))), "y"), "[?,4,8] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "Expand", {"x"}, Attr("shape", IntsValue({-2, 4, 8})))), HasSubstr("-2"));
  EXPECT_EQ(OutputOf(g + OpNode("y", "Cast", {"x"}, Attr("to", "type: DT_INT64")), "y"), "[?,4,8] int64");
}

TEST(ShapeTest, GlobalNormClipFactor) {
  std::string g = ParamNode("a", {3, 4}) + ParamNode("b", {5});
  EXPECT_EQ(OutputOf(g + OpNode("y", "GlobalNormClipFactor", {"a", "b"}, Attr("max_norm", "f: 1")), "y"), "[] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "GlobalNormClipFactor", {"a"}, Attr("max_norm", "f: 0"))),
              HasSubstr("'max_norm' must be > 0"));
  EXPECT_EQ(OutputOf(g + OpNode("y", "SquaredNorm", {"a", "b"}), "y"), "[1] float32");
}

TEST(ShapeTest, CausalMask) {
  std::string g = InputNode("s", {-1, 4, 6, 6}) + InputNode("wide", {-1, 2, 6});
  EXPECT_EQ(OutputOf(g + OpNode("y", "CausalMask", {"s"}), "y"), "[?,4,6,6] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "CausalMask", {"wide"}), "y"), "[?,2,6] float32");
  EXPECT_THAT(LoadError(InputNode("t", {6, 2}) + OpNode("y", "CausalMask", {"t"})),
              HasSubstr("more queries (6) than keys (2)"));
}

TEST(ShapeTest, LstmLayer) {
  std::string g = InputNode("x", {7, -1, 3}) + ParamNode("w", {8, 3}) + ParamNode("r", {8, 2}) +
                  ParamNode("b", {8}) + InputNode("h0", {-1, 2}) + InputNode("c0", {-1, 2});
  const std::string hidden = Attr("hidden_size", "i: 2");
  EXPECT_EQ(OutputOf(g + OpNode("y", "LstmLayer", {"x", "w", "r", "b"}, hidden), "y"), "[7,?,2] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "LstmLayer", {"x", "w", "r", "b", "h0", "c0"}, hidden), "y"), "[7,?,2] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "LstmLayer", {"x", "w", "r", "b", "h0"}, hidden)),
              HasSubstr("h0 and c0 or nothing"));
  EXPECT_THAT(LoadError(g + OpNode("y", "LstmLayer", {"x", "r", "r", "b"}, hidden)), HasSubstr("must be [8, 3]"));
  EXPECT_EQ(OutputOf(g + OpNode("y", "LstmLayerGrad", {"x", "w", "r", "x", "x", "x"}, hidden), "y"),
            "[7,?,3] float32");
}

TEST(ShapeTest, GruLayer) {
  std::string g = InputNode("x", {7, -1, 3}) + ParamNode("w", {6, 3}) + ParamNode("r", {6, 2}) +
                  ParamNode("b", {12}) + InputNode("h0", {-1, 2});
  const std::string hidden = Attr("hidden_size", "i: 2");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GruLayer", {"x", "w", "r", "b", "h0"}, hidden), "y"), "[7,?,2] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "GruLayer", {"x", "w", "r", "w"}, hidden)), HasSubstr("must be [12]"));
  EXPECT_THAT(LoadError(g + OpNode("y", "GruLayer", {"x", "w", "r", "b", "h0", "h0"}, hidden)),
              HasSubstr("takes h0 or nothing"));
  EXPECT_EQ(OutputOf(g + OpNode("y", "GruLayerGrad", {"x", "w", "r", "x", "x", "x"}, hidden), "y"),
            "[7,?,3] float32");
}

TEST(ShapeTest, LayerNorm) {
  std::string g = InputNode("x", {-1, 16, 32}) + ParamNode("s", {32}) + ParamNode("b", {32}) + ParamNode("s2", {16, 32});
  EXPECT_EQ(OutputOf(g + OpNode("y", "LayerNorm", {"x", "s", "b"}), "y"), "[?,16,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "LayerNorm", {"x", "s2", "s2"}, Attr("axis", "i: 1")), "y"), "[?,16,32] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "LayerNorm", {"x", "s2", "b"})), HasSubstr("must have the normalised dims"));
}

TEST(ShapeTest, Reductions) {
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "ReduceSum", {"x"}, Attr("axes", IntsValue({1})) + Attr("keepdims", "b: false")),
                     "y"),
            "[?,32,32] float32");
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "ReduceMean", {"x"}, Attr("axes", IntsValue({-2, -1}))), "y"),
            "[?,3,1,1] float32");
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "ReduceMax", {"x"}), "y"), "[1,1,1,1] float32");
  EXPECT_THAT(LoadError(kImage + OpNode("y", "ReduceSum", {"x"}, Attr("axes", IntsValue({1, -3})))),
              HasSubstr("repeats an axis"));
}

TEST(ShapeTest, Concat) {
  std::string g = kImage + InputNode("z", {-1, 5, 32, 32});
  EXPECT_EQ(OutputOf(g + OpNode("y", "Concat", {"x", "z"}), "y"), "[?,8,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Concat", {"x", "x"}, Attr("axis", "i: -1")), "y"), "[?,3,32,64] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "Concat", {"x", "z"}, Attr("axis", "i: 2"))),
              HasSubstr("cannot concatenate along axis 2"));
}

TEST(ShapeTest, BatchNorm) {
  std::string g = kImage;
  for (const char* p : {"s", "o", "m", "v"}) g += ParamNode(p, {3});
  EXPECT_EQ(OutputOf(g + OpNode("y", "BatchNorm", {"x", "s", "o", "m", "v"}), "y"), "[?,3,32,32] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "BatchNorm", {"x", "s", "o", "m", "v"}, Attr("epsilon", "f: 0"))),
              HasSubstr("'epsilon' must be > 0"));
  std::string wrong = kImage + ParamNode("s", {4}) + ParamNode("o", {3}) + ParamNode("m", {3}) + ParamNode("v", {3});
  EXPECT_THAT(LoadError(wrong + OpNode("y", "BatchNorm", {"x", "s", "o", "m", "v"})),
              HasSubstr("input 'scale' [4] does not match the channels of input 'x' [?,3,32,32]"));
}

TEST(ShapeTest, Feedback) {
  std::string g = "loop { name: \"l\" }\n" + InputNode("x", {4}) +
                  OpNode("f", "Feedback", {"y"}, Attr("loop", "s: \"l\"") + Attr("shape", ShapeValue({4}))) +
                  OpNode("y", "Add", {"x", "f"});
  EXPECT_EQ(OutputOf(g, "f"), "[4] float32");
}

TEST(ShapeTest, FloatAttributeAcceptsAnIntegerLiteral) {
  EXPECT_EQ(OutputOf(kImage + OpNode("y", "Dropout", {"x"}, Attr("rate", "i: 0")), "y"), "[?,3,32,32] float32");
}

TEST(ShapeTest, FlopsPerSample) {
  std::string g = InputNode("x", {-1, 784}) + ParamNode("w", {784, 10}) + OpNode("y", "MatMul", {"x", "w"});
  auto graph = LoadText(g);
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ(FlopsPerSample(*(*graph)->FindNode("y")), 2 * 784 * 10);
}

// A convolution's two gradients each cost what its forward does.
TEST(ShapeTest, ConvolutionGradientFlopsPerSample) {
  std::string g = kImage + ParamNode("f", {8, 3, 5, 5}) + OpNode("y", "Conv2D", {"x", "f"}) +
                  InputNode("dy", {-1, 8, 28, 28}) + OpNode("dx", "Conv2DBackpropInput", {"x", "f", "dy"}) +
                  OpNode("df", "Conv2DBackpropFilter", {"x", "f", "dy"});
  auto graph = LoadText(g);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const int64_t forward = 2 * (8 * 28 * 28) * (3 * 5 * 5);
  EXPECT_EQ(FlopsPerSample(*(*graph)->FindNode("y")), forward);
  EXPECT_EQ(FlopsPerSample(*(*graph)->FindNode("dx")), forward);
  EXPECT_EQ(FlopsPerSample(*(*graph)->FindNode("df")), forward);
}

// Runs last in this file (gtest keeps declaration order within a binary).
// Gradient and training ops: each output takes the shape of the input it is
// the gradient of (or the parameter's).
TEST(ShapeTest, GradientOps) {
  std::string g = kImage + InputNode("dy", {-1, 3, 32, 32}) + ParamNode("f", {3, 3, 3, 3}) +
                  InputNode("dm", {-1, 10}) + InputNode("logits", {-1, 10}) +
                  InputNode("labels", {-1}, "DT_INT32") + ParamNode("scalar", {}) + ParamNode("c", {3});
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad", "SoftmaxGrad"}) {
    EXPECT_EQ(OutputOf(g + OpNode("y", op, {"dy", "x"}), "y"), "[?,3,32,32] float32") << op;
  }
  EXPECT_EQ(OutputOf(g + OpNode("y", "BiasAddGrad", {"dy"}), "y"), "[3] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2DBackpropInput", {"x", "f", "dy"}), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Conv2DBackpropFilter", {"x", "f", "dy"}), "y"), "[3,3,3,3] float32");
  for (const char* op : {"MaxPoolGrad", "AvgPoolGrad"}) {
    EXPECT_EQ(OutputOf(g + OpNode("y", op, {"x", "dy"}, Attr("ksize", IntsValue({2, 2}))), "y"), "[?,3,32,32] float32");
  }
  EXPECT_EQ(OutputOf(g + OpNode("y", "GlobalAvgPoolGrad", {"x", "dy"}), "y"), "[?,3,32,32] float32");
  for (const char* op : {"SoftmaxCrossEntropyGrad", "HingeLossGrad", "LogisticLossGrad"}) {
    EXPECT_EQ(OutputOf(g + OpNode("y", op, {"logits", "labels", "scalar"}), "y"), "[?,10] float32") << op;
  }
  EXPECT_EQ(OutputOf(g + OpNode("y", "ReduceToShapeOf", {"dy", "c"}), "y"), "[3] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "WhereGrad", {"dy", "c"}, Attr("branch", "b: true")), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "ReshapeLike", {"dm", "logits"}), "y"), "[?,10] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "SliceLike", {"dm", "c"}, Attr("axis", "i: 0") + Attr("begin", "i: 0")), "y"),
            "[3] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "BatchNormGrad", {"dy", "x", "c", "c", "c"}), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "DropoutGrad", {"dy"}), "y"), "[?,3,32,32] float32");
  for (const char* op : {"GeluGrad", "ClipGrad", "HardSigmoidGrad", "HardSwishGrad", "LogSoftmaxGrad", "SqrtGrad",
                         "ReciprocalGrad", "ExpGrad", "LogGrad", "ErfGrad", "ExpandReduced", "SliceGrad", "PadGrad"}) {
    std::string attrs = std::string(op) == "SliceGrad" ? Attr("begin", "i: 0")
                        : std::string(op) == "PadGrad" ? Attr("pads", IntsValue({0, 0, 0, 0, 0, 0, 0, 0}))
                                                        : "";
    EXPECT_EQ(OutputOf(g + OpNode("y", op, {"dy", "x"}, attrs), "y"), "[?,3,32,32] float32") << op;
  }
  for (const char* op : {"DivGradDivisor", "PowGradBase", "PowGradExponent", "ReduceMaxGrad"}) {
    EXPECT_EQ(OutputOf(g + OpNode("y", op, {"dy", "x", "c"}), "y"), "[?,3,32,32] float32") << op;
  }
  EXPECT_EQ(OutputOf(g + ParamNode("table", {9, 4}) + InputNode("ids", {-1}, "DT_INT32") + InputNode("rows", {-1, 4}) +
                         OpNode("y", "GatherGrad", {"rows", "ids", "table"}),
                     "y"),
            "[9,4] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "LayerNormGrad", {"dy", "x", "f", "c", "c"}, Attr("axis", "i: 1")), "y"),
            "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "AddN", {"dy", "x"}), "y"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "Gradient", {"f"}, Attr("parameter", "s: \"f\"")), "y"), "[3,3,3,3] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "LearningRate", {}, Attr("base", "f: 0.1")), "y"), "[] float32");
  // AllReduce has one output per input.
  std::string bucket = OpNode("y", "AllReduce", {"c", "f"}, Attr("bucket", "i: 0"));
  EXPECT_EQ(OutputOf(g + bucket, "y"), "[3] float32");
  EXPECT_EQ(OutputOf(g + bucket + OpNode("z", "Gradient", {"y:1"}, Attr("parameter", "s: \"f\"")), "z"),
            "[3,3,3,3] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "AllReduce", {"c"}, Attr("bucket", "i: 0")) +
                        OpNode("z", "Gradient", {"y:1"}, Attr("parameter", "s: \"f\""))),
              HasSubstr("has 1 output(s)"));
  EXPECT_THAT(LoadError(g + OpNode("y", "AllReduce", {"dy"}, Attr("bucket", "i: 0"))),
              HasSubstr("must have a fully known shape"));
  // CompressedAllReduce: one output per input (averages, then next state).
  std::string compressed = OpNode("y", "CompressedAllReduce", {"f", "c"},
                                  Attr("bucket", "i: 1") + Attr("method", "s: \"topk\""));
  EXPECT_EQ(OutputOf(g + compressed, "y"), "[3,3,3,3] float32");
  EXPECT_EQ(OutputOf(g + compressed + OpNode("z", "Gradient", {"y:1"}, Attr("parameter", "s: \"f\"")), "z"), "[3] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "CompressedAllReduce", {"dy"}, Attr("bucket", "i: 0") + Attr("method", "s: \"qsgd\""))),
              HasSubstr("must have a fully known shape"));
  EXPECT_THAT(LoadError(g + OpNode("y", "CompressedAllReduce", {"f"}, Attr("bucket", "i: 0"))), HasSubstr("method"));
  EXPECT_EQ(OutputOf(g + OpNode("y", "ApplySgd", {"c", "c", "scalar", "c"}), "y"), "[3] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "ApplyAdam", {"c", "c", "scalar", "c", "c"}), "y"), "[3] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "ApplySgd", {"c", "f", "scalar"})), HasSubstr("shapes disagree"));
}

TEST(ShapeTest, GroupCollectives) {
  // The group is declared (loading checks it); its size is known only with `workers`.
  std::string g = "records { group { name: \"model\" size: 2 } }\n" + InputNode("x", {-1, 6}) +
                  ParamNode("w", {6, 4});
  auto group = [](int size) { return Attr("group", "s: \"model\"") + Attr("group_size", absl::StrCat("i: ", size)); };
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupAllGather", {"x"}, group(4)), "y"), "[?,6] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupAllGather", {"w"}, group(4)), "y"), "[24,4] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupReduceScatter", {"w"}, group(2)), "y"), "[3,4] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupReduceScatter", {"x"}, group(4)), "y"), "[?,6] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupAllReduce", {"w"}, group(2)), "y"), "[6,4] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupIdentity", {"x"}, group(2)), "y"), "[?,6] float32");
  EXPECT_EQ(OutputOf(g + OpNode("y", "GroupSendRecv", {"w"}, group(2) + Attr("offsets", "list { i: 1 }")), "y"),
            "[6,4] float32");
  EXPECT_THAT(LoadError(g + OpNode("y", "GroupSendRecv", {"w"}, group(2) + Attr("offsets", "list { }"))),
              HasSubstr("offsets must not be empty"));
  // LowRankPush: w (6x4) as a rank-1 segment, two offsets: state [2,24] twice, [2,4], [2,2].
  const std::string push_attrs = group(2) + Attr("offsets", "list { i: 1 i: 1 }") +
                                 Attr("segments", "list { i: 6 i: 4 i: 1 }");
  std::string state = ParamNode("sent", {2, 24}) + ParamNode("received", {2, 24}) + ParamNode("bases", {2, 4}) +
                      ParamNode("started", {2, 2});
  EXPECT_EQ(OutputOf(g + state + OpNode("y", "LowRankPush", {"w", "sent", "received", "bases", "started"}, push_attrs),
                     "y"),
            "[6,4] float32");
  EXPECT_THAT(LoadError(g + state + OpNode("y", "LowRankPush", {"w", "sent", "received", "started", "started"},
                                           push_attrs)),
              HasSubstr("the segments and offsets make it [2,4]"));
  EXPECT_THAT(LoadError(g + state + OpNode("y", "LowRankPush", {"w", "sent", "received", "bases", "started"},
                                           group(2) + Attr("offsets", "list { i: 1 i: 1 }") +
                                               Attr("segments", "list { i: 5 i: 4 i: 1 }"))),
              HasSubstr("the segments cover 20"));
  EXPECT_THAT(LoadError(g + OpNode("y", "GroupReduceScatter", {"w"}, group(4))),
              HasSubstr("(6) does not divide into 4 group members"));
  EXPECT_THAT(LoadError(g + OpNode("y", "GroupAllGather", {"w"}, group(0))), HasSubstr("group_size must be >= 1"));
  EXPECT_THAT(LoadError(g + OpNode("y", "GroupAllGather", {"w"}, Attr("group_size", "i: 2"))), HasSubstr("group"));
}

TEST(ShapeTest, SendAndRecv) {
  std::string g = InputNode("x", {-1, 6});
  std::string pair = OpNode("s", "Send", {"x"}) + OpNode("r", "Recv", {"s"});
  EXPECT_EQ(OutputOf(g + pair, "s"), "[?,6] float32");
  EXPECT_EQ(OutputOf(g + pair, "r"), "[?,6] float32");
  // One rank's end of a cut pair: the shape comes from the plan.
  EXPECT_EQ(OutputOf(OpNode("r", "Recv", {}, Attr("peer", "i: 0") + Attr("shape", ShapeValue({-1, 6}))), "r"),
            "[?,6] float32");
  EXPECT_THAT(LoadError(OpNode("r", "Recv", {}, Attr("shape", ShapeValue({-1, 6})))), HasSubstr("needs the rank"));
  EXPECT_THAT(LoadError(g + OpNode("r", "Recv", {"x", "x"})), HasSubstr("at most one Send"));
}

// The place pass's copies keep shape and dtype, and name a device, not the host.
TEST(ShapeTest, CopyToDeviceAndCopyToHost) {
  const std::string labels = OpNode("l", "Input", {}, Attr("shape", ShapeValue({-1})) + Attr("dtype", "type: DT_INT32"));
  const std::string sim = Attr("device", "s: \"sim:0\"");
  EXPECT_EQ(OutputOf(kImage + OpNode("d", "CopyToDevice", {"x"}, sim), "d"), "[?,3,32,32] float32");
  EXPECT_EQ(OutputOf(labels + OpNode("d", "CopyToDevice", {"l"}, sim), "d"), "[?] int32");
  EXPECT_EQ(OutputOf(kImage + OpNode("d", "CopyToDevice", {"x"}, sim) + OpNode("h", "CopyToHost", {"d"}, sim), "h"),
            "[?,3,32,32] float32");
  EXPECT_THAT(LoadError(kImage + OpNode("d", "CopyToDevice", {"x"}, Attr("device", "s: \"cpu:0\""))),
              HasSubstr("attribute 'device' must name a device"));
  EXPECT_THAT(LoadError(kImage + OpNode("h", "CopyToHost", {"x"})), HasSubstr("missing required attribute 'device'"));
}

TEST(ShapeTest, ShardedParameterValidatesItsInitAgainstTheFullShape) {
  std::string shard = Attr("shard_group", "s: \"model\"") + Attr("shard_axis", "i: 1") + Attr("shard_count", "i: 2");
  EXPECT_EQ(OutputOf(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4, 3})) + shard), "w"), "[4,3] float32");
  EXPECT_THAT(LoadError(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4, 3})) + shard +
                                                          Attr("init", "tensor { dtype: DT_FLOAT shape { dim: 4 dim: 3 } "
                                                                       "init { kind: \"zeros\" } }"))),
              HasSubstr("init"));
  EXPECT_THAT(LoadError(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4, 3})) + Attr("shard_count", "i: 2"))),
              HasSubstr("needs its shard_group"));
  std::string bad_axis = Attr("shard_group", "s: \"model\"") + Attr("shard_axis", "i: 2") + Attr("shard_count", "i: 2");
  EXPECT_THAT(LoadError(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4, 3})) + bad_axis)),
              HasSubstr("shard_axis 2 is outside"));
}

// A piece of a larger tensor (a parameter server's chunk): `init` is the
// larger tensor's, and the piece must fit in it.
TEST(ShapeTest, APieceOfAParameterValidatesItsInitAgainstTheLargerShape) {
  const std::string piece = Attr("init_offset", "i: 8") + Attr("init_of_shape", ShapeValue({4, 3}));
  const std::string init = Attr("init", "tensor { dtype: DT_FLOAT shape { dim: 4 dim: 3 } init { kind: \"zeros\" } }");
  EXPECT_EQ(OutputOf(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({4})) + piece + init), "w"), "[4] float32");
  EXPECT_THAT(LoadError(OpNode("w", "Parameter", {}, Attr("shape", ShapeValue({5})) + piece + init)),
              HasSubstr("does not fit in init_of_shape [4,3]"));
}

TEST(ShapeTest, CodedSendAndGather) {
  const std::string code = Attr("n", "i: 3") + Attr("k", "i: 2") + Attr("channel", "i: 2");
  std::string g = InputNode("x", {-1, 6});
  EXPECT_EQ(OutputOf(g + OpNode("s", "CodedSend", {"x"}, code + Attr("peer", "i: 0") + Attr("worker", "i: 1")), "s"),
            "[?,6] float32");
  // The gather keeps `like`'s rows (the labels: the batch) and its own columns.
  std::string labels = InputNode("y", {-1});
  const std::string gather = code + Attr("peers", IntsValue({1, 2, 3})) + Attr("cols", "i: 10");
  EXPECT_EQ(OutputOf(labels + OpNode("z", "CodedGather", {"y"}, gather), "z"), "[?,10] float32");
  EXPECT_EQ(OutputOf(ParamNode("w", {784, 10}) + OpNode("z", "CodedGather", {"w"}, gather), "z"), "[784,10] float32");
  EXPECT_THAT(LoadError(ParamNode("w", {784, 10}) + OpNode("z", "CodedGather", {"w"},
                                                          code + Attr("peers", IntsValue({1, 2, 3})) +
                                                              Attr("cols", "i: 0"))),
              HasSubstr("cols must be >= 1"));
  EXPECT_THAT(LoadError(g + OpNode("s", "CodedSend", {"x"}, code + Attr("peer", "i: 0"))), HasSubstr("worker"));
}

TEST(RegistryTest, EveryOpHasShapeAndCostFunctionsAndATestHere) {
  for (const std::string& name : OpRegistry::Global().OpNames()) {
    const OpDef* def = OpRegistry::Global().Find(name);
    EXPECT_TRUE(static_cast<bool>(def->shape_fn)) << name;
    EXPECT_TRUE(static_cast<bool>(def->cost_fn)) << name << " has no cost function";
    EXPECT_FALSE(def->summary.empty()) << name << " has no summary";
    EXPECT_TRUE(Covered().count(name)) << name << " has no shape test in shape_inference_test.cc";
  }
}

TEST(RegistryTest, DuplicateRegistrationIsRefused) {
  OpRegistry& r = OpRegistry::Global();
  OpDef relu = *r.Find("Relu");
  EXPECT_EQ(r.Register(relu).code(), absl::StatusCode::kAlreadyExists);
}

TEST(RegistryTest, ModelOpsAreRegistered) {
  for (const char* op : {"Input", "Parameter", "Const", "MatMul", "BiasAdd", "Conv2D", "MaxPool", "AvgPool",
                         "GlobalAvgPool", "Relu", "Sigmoid", "Tanh", "Softmax", "SoftmaxCrossEntropy", "HingeLoss",
                         "LogisticLoss", "Add", "Mul", "Flatten", "Reshape", "Concat", "BatchNorm", "Dropout"}) {
    EXPECT_NE(OpRegistry::Global().Find(op), nullptr) << op;
  }
}

}  // namespace
}  // namespace nereid
