// Tests for ScopedTimestamp, one per law of scoped_timestamp.h, over every
// timestamp of depth 0..2 with epoch and counters in 0..2.

#include "schedulers/scoped_timestamp.h"

#include <cstdint>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace {

std::vector<ScopedTimestamp> SmallTimestamps() {
  std::vector<ScopedTimestamp> all;
  for (int64_t e = 0; e <= 2; ++e) {
    all.push_back({e, {}});
    for (int64_t a = 0; a <= 2; ++a) {
      all.push_back({e, {a}});
      for (int64_t b = 0; b <= 2; ++b) all.push_back({e, {a, b}});
    }
  }
  return all;
}

TEST(ScopedTimestampTest, LessEqualIsReflexive) {
  for (const ScopedTimestamp& a : SmallTimestamps()) EXPECT_TRUE(LessEqual(a, a)) << a;
}

TEST(ScopedTimestampTest, LessEqualIsAntisymmetric) {
  for (const ScopedTimestamp& a : SmallTimestamps()) {
    for (const ScopedTimestamp& b : SmallTimestamps()) {
      EXPECT_EQ(LessEqual(a, b) && LessEqual(b, a), a == b) << a << " " << b;
    }
  }
}

TEST(ScopedTimestampTest, LessEqualIsTransitive) {
  const std::vector<ScopedTimestamp> all = SmallTimestamps();
  int chains = 0;
  for (const ScopedTimestamp& a : all) {
    for (const ScopedTimestamp& b : all) {
      if (!LessEqual(a, b)) continue;
      for (const ScopedTimestamp& c : all) {
        if (!LessEqual(b, c)) continue;
        ++chains;
        EXPECT_TRUE(LessEqual(a, c)) << a << " <= " << b << " <= " << c;
      }
    }
  }
  EXPECT_GT(chains, 1000);  // the domain has long chains, not only equalities
}

TEST(ScopedTimestampTest, DepthsDoNotCompare) {
  const ScopedTimestamp outer{0, {1}};
  const ScopedTimestamp inner{0, {1, 0}};
  EXPECT_FALSE(LessEqual(outer, inner));
  EXPECT_FALSE(LessEqual(inner, outer));
  EXPECT_FALSE(LessEqual(ScopedTimestamp{0, {}}, ScopedTimestamp{5, {0}}));
  for (const ScopedTimestamp& a : SmallTimestamps()) {
    for (const ScopedTimestamp& b : SmallTimestamps()) {
      if (a.depth() == b.depth()) continue;
      EXPECT_FALSE(LessEqual(a, b)) << a << " " << b;
    }
  }
}

TEST(ScopedTimestampTest, ProductOrder) {
  EXPECT_TRUE(LessEqual(ScopedTimestamp{0, {1, 2}}, ScopedTimestamp{1, {1, 3}}));
  EXPECT_FALSE(LessEqual(ScopedTimestamp{1, {1, 2}}, ScopedTimestamp{0, {5, 5}}));  // epoch counts
  // Round 5 of step 1 and round 0 of step 2 are incomparable.
  const ScopedTimestamp a{0, {1, 5}};
  const ScopedTimestamp b{0, {2, 0}};
  EXPECT_FALSE(LessEqual(a, b));
  EXPECT_FALSE(LessEqual(b, a));
  for (const ScopedTimestamp& x : SmallTimestamps()) {
    for (const ScopedTimestamp& y : SmallTimestamps()) {
      if (x.depth() != y.depth()) continue;
      bool le = x.epoch <= y.epoch;
      for (int i = 0; i < x.depth(); ++i) le = le && x.counters[i] <= y.counters[i];
      EXPECT_EQ(LessEqual(x, y), le) << x << " " << y;
    }
  }
}

TEST(ScopedTimestampTest, ToStringAndKeyOrder) {
  EXPECT_EQ((ScopedTimestamp{0, {3}}).ToString(), "(0; 3)");
  EXPECT_EQ((ScopedTimestamp{2, {1, 4}}).ToString(), "(2; 1, 4)");
  EXPECT_EQ((ScopedTimestamp{7, {}}).ToString(), "(7)");
  std::ostringstream os;
  os << ScopedTimestamp{1, {2}};
  EXPECT_EQ(os.str(), "(1; 2)");
  // The key order is total and strict: exactly one of a < b, b < a, a == b.
  ScopedTimestampKeyLess less;
  for (const ScopedTimestamp& a : SmallTimestamps()) {
    for (const ScopedTimestamp& b : SmallTimestamps()) {
      EXPECT_EQ(int{less(a, b)} + int{less(b, a)} + int{a == b}, 1) << a << " " << b;
    }
  }
}

}  // namespace
}  // namespace nereid
