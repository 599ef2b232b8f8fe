#include "graph/process_groups.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ProcessGroupsTest, ParsesAndPrintsDeclarations) {
  absl::StatusOr<std::vector<GroupDecl>> groups = ParseGroupDecls("model=blocks:4;replicas=strided:4");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].name, "model");
  EXPECT_EQ((*groups)[0].layout, GroupLayout::kBlocks);
  EXPECT_EQ((*groups)[1].layout, GroupLayout::kStrided);
  EXPECT_EQ(GroupDeclsText(*groups), "model=blocks:4;replicas=strided:4");
  EXPECT_TRUE(ParseGroupDecls("")->empty());
}

TEST(ProcessGroupsTest, RefusesMalformedDeclarations) {
  for (const char* bad : {"model", "model=blocks", "model=rings:2", "model=blocks:0", "=blocks:2",
                          "a=blocks:2;a=strided:2", "s=ranks:", "s=ranks:2-1", "s=ranks:-1", "s=ranks:0-x"}) {
    EXPECT_FALSE(ParseGroupDecls(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseGroupDecls("model=rings:2").status().message()), HasSubstr("'model=rings:2'"));
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
  absl::StatusOr<std::vector<GroupDecl>> groups = ParseGroupDecls("server=ranks:1-2;chief=ranks:0");
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(GroupDeclsText(*groups), "server=ranks:1-2;chief=ranks:0-0");
  const GroupDecl& server = (*groups)[0];
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
