// Tests for Antichain, one per law of antichain.h, with random insertions of
// two-counter timestamps (a partial order) and of ints (a total order).

#include "schedulers/antichain.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {
namespace {

std::vector<ScopedTimestamp> RandomTimestamps(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> coord(0, 4);
  std::vector<ScopedTimestamp> out;
  for (int i = 0; i < n; ++i) out.push_back({coord(rng), {coord(rng), coord(rng)}});
  return out;
}

// Every probe of the 5 x 5 x 5 grid.
std::vector<ScopedTimestamp> Grid() {
  std::vector<ScopedTimestamp> out;
  for (int64_t e = 0; e <= 4; ++e) {
    for (int64_t a = 0; a <= 4; ++a) {
      for (int64_t b = 0; b <= 4; ++b) out.push_back({e, {a, b}});
    }
  }
  return out;
}

TEST(AntichainTest, ElementsAreIncomparable) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Antichain<ScopedTimestamp> chain;
    for (const ScopedTimestamp& t : RandomTimestamps(seed, 30)) {
      chain.Insert(t);
      const auto& e = chain.elements();
      for (size_t i = 0; i < e.size(); ++i) {
        for (size_t j = 0; j < e.size(); ++j) {
          if (i == j) continue;
          ASSERT_FALSE(LessEqual(e[i], e[j])) << e[i] << " <= " << e[j] << " seed " << seed;
        }
      }
    }
    EXPECT_FALSE(chain.empty());
  }
}

TEST(AntichainTest, CoversWhatWasInserted) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Antichain<ScopedTimestamp> chain;
    std::vector<ScopedTimestamp> inserted;
    for (const ScopedTimestamp& t : RandomTimestamps(seed, 15)) {
      chain.Insert(t);
      inserted.push_back(t);
      for (const ScopedTimestamp& x : Grid()) {
        bool covered = false;
        for (const ScopedTimestamp& y : inserted) covered = covered || LessEqual(y, x);
        ASSERT_EQ(chain.LessEqual(x), covered) << x << " seed " << seed;
      }
    }
  }
}

TEST(AntichainTest, InsertReportsChange) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Antichain<ScopedTimestamp> chain;
    for (const ScopedTimestamp& t : RandomTimestamps(seed, 30)) {
      const bool covered = chain.LessEqual(t);
      const Antichain<ScopedTimestamp> before = chain;
      ASSERT_EQ(chain.Insert(t), !covered) << t;
      if (covered) {
        EXPECT_EQ(chain, before);
      } else {
        bool present = false;
        for (const ScopedTimestamp& e : chain.elements()) present = present || e == t;
        EXPECT_TRUE(present) << t;
      }
    }
  }
  // Examples: an incomparable time joins, a smaller one replaces, an equal one is refused.
  Antichain<ScopedTimestamp> f;
  EXPECT_TRUE(f.Insert({0, {1, 5}}));
  EXPECT_TRUE(f.Insert({0, {2, 0}}));
  EXPECT_EQ(f.size(), 2u);
  EXPECT_FALSE(f.Insert({0, {2, 0}}));
  EXPECT_TRUE(f.Insert({0, {1, 0}}));
  EXPECT_EQ(f.size(), 1u);
  EXPECT_EQ(f.elements()[0], (ScopedTimestamp{0, {1, 0}}));
}

TEST(AntichainTest, TotalOrderKeepsOneElementByOperatorLessEqual) {
  Antichain<int> chain;
  EXPECT_TRUE(chain.Insert(5));
  EXPECT_FALSE(chain.Insert(7));
  EXPECT_TRUE(chain.Insert(3));
  EXPECT_EQ(chain.elements(), std::vector<int>{3});
  EXPECT_TRUE(chain.LessEqual(3));
  EXPECT_FALSE(chain.LessEqual(2));
}

}  // namespace
}  // namespace nereid
