#include "graph/process_groups.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ProcessGroupsTest, DeclarationsRoundTripThroughThePlanRecords) {
  Graph graph;
  EXPECT_TRUE(DeclaredGroups(graph)->empty());
  DeclareGroups(graph, {GroupDecl{"model", GroupLayout::kBlocks, 4}, GroupDecl{"replicas", GroupLayout::kStrided, 4},
                        GroupDecl{"server", GroupLayout::kRanks, 2, 1}});
  absl::StatusOr<std::vector<GroupDecl>> groups = DeclaredGroups(graph);
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 3u);
  EXPECT_EQ((*groups)[0].name, "model");
  EXPECT_EQ((*groups)[0].layout, GroupLayout::kBlocks);
  EXPECT_EQ((*groups)[1].layout, GroupLayout::kStrided);
  EXPECT_EQ((*groups)[2].layout, GroupLayout::kRanks);
  EXPECT_EQ((*groups)[2].first, 1);
  EXPECT_EQ(GroupDeclsText(*groups), "model=blocks:4;replicas=strided:4;server=ranks:1-2");
}

TEST(ProcessGroupsTest, RefusesMalformedDeclarations) {
  auto error = [](const char* name, int size, int first) {
    Graph graph;
    DeclareGroups(graph, {GroupDecl{"a", GroupLayout::kBlocks, 2}, GroupDecl{name, GroupLayout::kRanks, size, first}});
    return std::string(DeclaredGroups(graph).status().message());
  };
  EXPECT_THAT(error("a", 2, 0), HasSubstr("group 'a' is declared twice"));
  EXPECT_THAT(error("", 2, 0), HasSubstr("without a name"));
  EXPECT_THAT(error("s", 0, 0), HasSubstr("group 's' has size 0"));
  EXPECT_THAT(error("s", 1, -1), HasSubstr("from rank -1"));
  Graph graph;
  GroupDeclaration* d = graph.mutable_header()->mutable_records()->add_group();
  d->set_name("m");
  d->set_size(2);
  d->set_layout(static_cast<GroupDeclaration::Layout>(7));
  EXPECT_THAT(std::string(DeclaredGroups(graph).status().message()), HasSubstr("unknown layout 7"));
}

TEST(ProcessGroupsTest, BlocksAreConsecutiveRanks) {
  GroupDecl g{"model", GroupLayout::kBlocks, 2};
  absl::StatusOr<GroupMembership> m = MembershipOf(g, 3, 4);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->members, ElementsAre(2, 3));
  EXPECT_EQ(m->group_rank, 1);
  EXPECT_EQ(m->instance, "model.1");
  EXPECT_EQ(GroupSize(g, 4), 2);
}

TEST(ProcessGroupsTest, StridesAreRanksEqualModuloTheStride) {
  GroupDecl g{"replicas", GroupLayout::kStrided, 2};
  absl::StatusOr<GroupMembership> m = MembershipOf(g, 3, 6);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->members, ElementsAre(1, 3, 5));
  EXPECT_EQ(m->group_rank, 1);
  EXPECT_EQ(m->instance, "replicas.1");
  EXPECT_EQ(GroupSize(g, 6), 3);
}

TEST(ProcessGroupsTest, ARankRangeIsOneInstanceAndTheOtherRanksAreNotMembers) {
  const GroupDecl server{"server", GroupLayout::kRanks, 2, 1};
  absl::StatusOr<GroupMembership> m = MembershipOf(server, 2, 5);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->members, ElementsAre(1, 2));
  EXPECT_EQ(m->group_rank, 1);
  EXPECT_EQ(m->instance, "server.0");
  EXPECT_EQ(GroupSize(server, 5), 2);
  EXPECT_TRUE(absl::IsNotFound(MembershipOf(server, 3, 5).status()));
  EXPECT_THAT(std::string(MembershipOf(server, 0, 2).status().message()), HasSubstr("beyond the 2 workers"));
}

TEST(ProcessGroupsTest, ALayoutThatDoesNotDivideTheWorldIsRefused) {
  absl::StatusOr<GroupMembership> m = MembershipOf(GroupDecl{"model", GroupLayout::kBlocks, 4}, 0, 6);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("does not divide 6 workers"));
}

}  // namespace
}  // namespace nereid
