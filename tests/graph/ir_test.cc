// The IR's editing operations keep both ends of every edge consistent.

#include "gmock/gmock.h"
#include "graph/import_export.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

NodeDef Def(const std::string& name, const std::string& op) {
  NodeDef d;
  d.set_name(name);
  d.set_op(op);
  return d;
}

class IrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = *g_.AddNode(Def("a", "Input"), 0);
    b_ = *g_.AddNode(Def("b", "Relu"), 1);
    c_ = *g_.AddNode(Def("c", "Add"), 2);
    ASSERT_TRUE(g_.AddEdge(a_, 0, b_, 0).ok());
    ASSERT_TRUE(g_.AddEdge(a_, 0, c_, 0).ok());
    ASSERT_TRUE(g_.AddEdge(b_, 0, c_, 1).ok());
  }
  Graph g_;
  Node* a_;
  Node* b_;
  Node* c_;
};

TEST_F(IrTest, EdgesAreVisibleFromBothEnds) {
  EXPECT_EQ(g_.num_nodes(), 3);
  EXPECT_EQ(g_.num_edges(), 3);
  EXPECT_EQ(a_->out_edges().size(), 2u);
  EXPECT_EQ(c_->input_edge(1)->src, b_);
  EXPECT_EQ(g_.FindNode("b"), b_);
  EXPECT_EQ(g_.FindNode("zz"), nullptr);
}

TEST_F(IrTest, DuplicateNamesAndOccupiedSlotsAreRefused) {
  EXPECT_EQ(g_.AddNode(Def("a", "Relu"), 1).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(g_.AddEdge(a_, 0, b_, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(g_.AddEdge(a_, 0, b_, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g_.AddEdge(a_, -1, b_, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(IrTest, RemoveNodeRemovesItsEdges) {
  g_.RemoveNode(b_);
  EXPECT_EQ(g_.num_nodes(), 2);
  EXPECT_EQ(g_.num_edges(), 1);
  EXPECT_EQ(c_->input_edge(1), nullptr);
  EXPECT_EQ(a_->out_edges().size(), 1u);
  EXPECT_EQ(g_.FindNode("b"), nullptr);
  // The name is free again.
  EXPECT_TRUE(g_.AddNode(Def("b", "Relu"), 1).ok());
}

TEST_F(IrTest, ReplaceInputRewiresOneSlot) {
  Node* d = *g_.AddNode(Def("d", "Relu"), 1);
  ASSERT_TRUE(g_.AddEdge(a_, 0, d, 0).ok());
  ASSERT_TRUE(g_.ReplaceInput(c_, 1, d, 0).ok());
  EXPECT_EQ(c_->input_edge(1)->src, d);
  EXPECT_TRUE(b_->out_edges().empty());
  EXPECT_EQ(d->out_edges().size(), 1u);
}

TEST_F(IrTest, RedirectOutputMovesEveryConsumer) {
  Node* d = *g_.AddNode(Def("d", "Identity"), 1);
  ASSERT_TRUE(g_.RedirectOutput(a_, 0, d, 0).ok());
  ASSERT_TRUE(g_.AddEdge(a_, 0, d, 0).ok());  // d now sits between a and its consumers
  EXPECT_EQ(b_->input_edge(0)->src, d);
  EXPECT_EQ(c_->input_edge(0)->src, d);
  EXPECT_EQ(a_->out_edges().size(), 1u);
  EXPECT_EQ(d->out_edges().size(), 2u);
}

TEST_F(IrTest, ControlEdgesAreDeduplicatedAndRemovable) {
  const Edge* e = g_.AddControlEdge(a_, c_);
  EXPECT_EQ(g_.AddControlEdge(a_, c_), e);
  EXPECT_EQ(c_->control_inputs().size(), 1u);
  EXPECT_TRUE(e->IsControl());
  g_.RemoveEdge(e);
  EXPECT_TRUE(c_->control_inputs().empty());
  EXPECT_EQ(a_->out_edges().size(), 2u);
}

TEST_F(IrTest, SetNumInputsRefusesToDropAConnectedSlot) {
  EXPECT_FALSE(g_.SetNumInputs(c_, 1).ok());
  EXPECT_TRUE(g_.SetNumInputs(c_, 3).ok());
  EXPECT_EQ(c_->num_inputs(), 3);
  EXPECT_TRUE(g_.SetNumInputs(c_, 2).ok());
}

TEST_F(IrTest, NodesStayInInsertionOrder) {
  g_.RemoveNode(a_);
  Node* z = *g_.AddNode(Def("a", "Input"), 0);
  std::vector<Node*> nodes = g_.nodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0], b_);
  EXPECT_EQ(nodes[2], z);
}

TEST(InputRefTest, Parses) {
  auto r = ParseInputRef("conv1/relu:2");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node, "conv1/relu");
  EXPECT_EQ(r->port, 2);
  r = ParseInputRef("^init");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->control);
  EXPECT_EQ(r->node, "init");
  EXPECT_FALSE(ParseInputRef("").ok());
  EXPECT_FALSE(ParseInputRef("x:").ok());
  EXPECT_FALSE(ParseInputRef(":0").ok());
  EXPECT_FALSE(ParseInputRef("x:99999999999").ok());
}

}  // namespace
}  // namespace nereid
