#include "comm/fault_plan.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(FaultPlanTest, ParsesEachKind) {
  auto plan = ParseFaultPlan("kill@3, delay=200ms,drop@5,corrupt@2,delay=1.5s@4");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->faults.size(), 5u);
  EXPECT_EQ(plan->faults[0].kind, Fault::Kind::kKill);
  EXPECT_EQ(plan->faults[0].call, 3);
  EXPECT_EQ(plan->faults[0].rank, -1);
  EXPECT_EQ(plan->faults[1].kind, Fault::Kind::kDelay);
  EXPECT_EQ(plan->faults[1].delay, absl::Milliseconds(200));
  EXPECT_EQ(plan->faults[1].call, 0);
  EXPECT_EQ(plan->faults[2].kind, Fault::Kind::kDrop);
  EXPECT_EQ(plan->faults[2].call, 5);
  EXPECT_EQ(plan->faults[3].kind, Fault::Kind::kCorrupt);
  EXPECT_EQ(plan->faults[3].call, 2);
  EXPECT_EQ(plan->faults[4].delay, absl::Milliseconds(1500));
  EXPECT_EQ(plan->faults[4].call, 4);
  EXPECT_EQ(plan->ToString(), "kill@3,delay=200ms,drop@5,corrupt@2,delay=1.5s@4");
}

TEST(FaultPlanTest, ParsesStop) {
  auto plan = ParseFaultPlan("rank=1:stop@7");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->faults.size(), 1u);
  EXPECT_EQ(plan->faults[0].kind, Fault::Kind::kStop);
  EXPECT_EQ(plan->faults[0].call, 7);
  EXPECT_EQ(plan->ToString(), "rank=1:stop@7");
}

// A slow rank is the executor's business: every step, no call number; the
// slowdowns that apply to a rank add up.
TEST(FaultPlanTest, ParsesSlowSteps) {
  auto plan = ParseFaultPlan("rank=1:slow=30ms,slow=5ms,rank=2:delay=1ms");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->faults.size(), 3u);
  EXPECT_EQ(plan->faults[0].kind, Fault::Kind::kSlow);
  EXPECT_EQ(plan->faults[0].call, 0);
  EXPECT_EQ(plan->SlowStepFor(1), absl::Milliseconds(35));
  EXPECT_EQ(plan->SlowStepFor(0), absl::Milliseconds(5));
  EXPECT_EQ(plan->SlowStepFor(2), absl::Milliseconds(5));
  EXPECT_EQ(plan->ToString(), "rank=1:slow=30ms,slow=5ms,rank=2:delay=1ms");
  auto bad = ParseFaultPlan("slow=30ms@3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("takes no @N"), std::string::npos);
  EXPECT_FALSE(ParseFaultPlan("slow=-1ms").ok());
}

TEST(FaultPlanTest, RankPrefixAndRoundTrip) {
  auto plan = ParseFaultPlan("rank=1:kill@3,delay=50ms,rank=0:corrupt@1");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->faults[0].rank, 1);
  EXPECT_EQ(plan->faults[1].rank, -1);
  EXPECT_EQ(plan->faults[2].rank, 0);
  EXPECT_EQ(plan->ForRank(1).ToString(), "rank=1:kill@3,delay=50ms");
  EXPECT_EQ(plan->ForRank(0).ToString(), "delay=50ms,rank=0:corrupt@1");
  EXPECT_EQ(plan->ForRank(2).ToString(), "delay=50ms");
  auto again = ParseFaultPlan(plan->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToString(), plan->ToString());
  EXPECT_TRUE(plan->faults[0].AppliesTo(1, 3));
  EXPECT_FALSE(plan->faults[0].AppliesTo(0, 3));
  EXPECT_FALSE(plan->faults[0].AppliesTo(1, 4));
  EXPECT_TRUE(plan->faults[1].AppliesTo(5, 99));
}

TEST(FaultPlanTest, EmptyIsNoFaults) {
  auto plan = ParseFaultPlan("  ");
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->empty());
}

void ExpectError(const std::string& text, const std::string& fragment) {
  auto plan = ParseFaultPlan(text);
  ASSERT_FALSE(plan.ok()) << text;
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(plan.status().message()).find(fragment), std::string::npos)
      << text << ": " << plan.status();
}

TEST(FaultPlanTest, ClearErrors) {
  ExpectError("kill", "'kill' needs a call number, e.g. kill@3");
  ExpectError("kill@0", "call number '0' is not an integer >= 1");
  ExpectError("drop@x", "call number 'x'");
  ExpectError("corrupt@", "call number ''");
  ExpectError("explode@1", "unknown fault 'explode'");
  ExpectError("delay=soon", "'soon' is not a finite duration");
  ExpectError("delay=-5ms", "'-5ms' is not a finite duration");
  ExpectError("delay=200", "'200' is not a finite duration");
  ExpectError("rank=one:kill@1", "rank 'one'");
  ExpectError("rank=1kill@1", "must be followed by ':'");
  ExpectError("kill@1,,drop@2", "empty item");
  ExpectError("kill@1,", "empty item");
}

TEST(FaultPlanTest, FromEnvironment) {
  std::map<std::string, std::string> vars;
  EnvGetter env = [&vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  auto none = FaultPlanFromEnv(env);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  vars["NEREID_FAULTS"] = "rank=1:drop@2";
  auto plan = FaultPlanFromEnv(env);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ToString(), "rank=1:drop@2");
  vars["NEREID_FAULTS"] = "drop";
  auto bad = FaultPlanFromEnv(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()).rfind("NEREID_FAULTS: ", 0), 0u) << bad.status();

  // restart=A: faults apply in that restart of the launcher only.
  vars["NEREID_FAULTS"] = "restart=0:rank=1:kill@30,restart=2:drop@4,delay=1ms";
  auto first = FaultPlanFromEnv(env);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->ToString(), "restart=0:rank=1:kill@30,delay=1ms");
  vars["NEREID_RESTART"] = "2";
  auto third = FaultPlanFromEnv(env);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->ToString(), "restart=2:drop@4,delay=1ms");
  vars["NEREID_RESTART"] = "x";
  EXPECT_THAT(std::string(FaultPlanFromEnv(env).status().message()), ::testing::HasSubstr("NEREID_RESTART='x'"));
  vars["NEREID_FAULTS"] = "restart=-1:drop@4";
  EXPECT_FALSE(ParseFaultPlan("restart=-1:drop@4").ok());
  EXPECT_FALSE(ParseFaultPlan("restart=1drop@4").ok());
}

}  // namespace
}  // namespace nereid
