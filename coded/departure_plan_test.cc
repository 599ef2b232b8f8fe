#include "coded/departure_plan.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(DeparturePlanTest, ScriptedRoundsAndRanges) {
  absl::StatusOr<DeparturePlan> plan = DeparturePlan::Parse("3:1+2;5-7:0", 4, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->GoneIn(2), IsEmpty());
  EXPECT_THAT(plan->GoneIn(3), ElementsAre(1, 2));
  EXPECT_THAT(plan->GoneIn(4), IsEmpty());  // back in the next round
  for (int r = 5; r <= 7; ++r) EXPECT_THAT(plan->GoneIn(r), ElementsAre(0)) << r;
  EXPECT_THAT(plan->GoneIn(8), IsEmpty());
}

TEST(DeparturePlanTest, RandomIsTheSameOnEveryRankAndNearItsRate) {
  absl::StatusOr<DeparturePlan> a = DeparturePlan::Parse("random:0.25", 8, 42);
  absl::StatusOr<DeparturePlan> b = DeparturePlan::Parse("random:0.25", 8, 42);
  absl::StatusOr<DeparturePlan> other = DeparturePlan::Parse("random:0.25", 8, 43);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  int gone = 0, differ = 0;
  for (int r = 0; r < 1000; ++r) {
    EXPECT_EQ(a->GoneIn(r), b->GoneIn(r));
    differ += a->GoneIn(r) != other->GoneIn(r);
    gone += static_cast<int>(a->GoneIn(r).size());
  }
  EXPECT_NEAR(gone / 8000.0, 0.25, 0.02);
  EXPECT_GT(differ, 500);  // another seed, other departures
}

TEST(DeparturePlanTest, MalformedPlansNameTheText) {
  for (const char* bad : {"random:1.5", "random:x", "3", "3:9", "-1:0", "5-2:0", "a:0", "3:0:1"}) {
    absl::StatusOr<DeparturePlan> plan = DeparturePlan::Parse(bad, 4, 0);
    EXPECT_FALSE(plan.ok()) << bad;
    EXPECT_THAT(plan.status().message(), HasSubstr(std::string("departures '") + bad + "'"));
  }
  EXPECT_TRUE(DeparturePlan::Parse("", 4, 0)->empty());
}

}  // namespace
}  // namespace nereid
