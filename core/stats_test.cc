#include "core/stats.h"

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(StatsTest, MedianOfAnOddCountIsTheMiddleValue) { EXPECT_DOUBLE_EQ(Median({1, 2, 3}), 2); }

TEST(StatsTest, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) { EXPECT_DOUBLE_EQ(Median({1, 2, 3, 10}), 2.5); }

TEST(StatsTest, MedianOfNothingIsZero) { EXPECT_DOUBLE_EQ(Median({}), 0); }

TEST(StatsTest, MedianDoesNotNeedSortedValues) {
  EXPECT_DOUBLE_EQ(Median({9, -1, 4, 7, 0}), 4);
  EXPECT_DOUBLE_EQ(Median({8, 3, -2, 5, 1, 6}), 4);  // 3 and 5
  EXPECT_DOUBLE_EQ(Median({5}), 5);
}

}  // namespace
}  // namespace nereid
