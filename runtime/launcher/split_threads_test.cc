#include "runtime/launcher/split_threads.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

TEST(SplitThreadsTest, EvenSplit) { EXPECT_EQ(SplitThreads(8, 4), (std::vector<int>{2, 2, 2, 2})); }

TEST(SplitThreadsTest, RemainderGoesToTheFirstRanks) {
  EXPECT_EQ(SplitThreads(7, 3), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(SplitThreads(5, 4), (std::vector<int>{2, 1, 1, 1}));
}

TEST(SplitThreadsTest, FewerCoresThanWorkersGivesOneEach) {
  EXPECT_EQ(SplitThreads(2, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(SplitThreads(0, 2), (std::vector<int>{1, 1}));
  EXPECT_EQ(SplitThreads(-3, 1), (std::vector<int>{1}));
}

TEST(SplitThreadsTest, NoWorkers) {
  EXPECT_TRUE(SplitThreads(8, 0).empty());
  EXPECT_TRUE(SplitThreads(8, -1).empty());
}

TEST(SplitThreadsTest, LawsHoldForManyInputs) {
  for (int t = -1; t <= 40; ++t) {
    for (int n = 1; n <= 17; ++n) {
      std::vector<int> c = SplitThreads(t, n);
      ASSERT_EQ(c.size(), static_cast<size_t>(n));
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0), std::max(t, n)) << t << " " << n;
      for (size_t i = 0; i < c.size(); ++i) {
        EXPECT_GE(c[i], 1);
        EXPECT_LE(c[i], c[0]);      // non-increasing from rank 0
        EXPECT_LE(c[0] - c[i], 1);  // balanced within one
      }
    }
  }
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
