#include "schedulers/timestamp.h"

#include <sstream>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(TimestampTest, OrdersLexicographically) {
  const Timestamp a{0, 5}, b{0, 6}, c{1, 0};
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(a, c);
  EXPECT_GT(c, a);
  EXPECT_LE(a, a);
  EXPECT_GE(a, a);
  EXPECT_FALSE(a < a);
  EXPECT_EQ(a, (Timestamp{0, 5}));
  EXPECT_NE(a, b);
  EXPECT_LT((Timestamp{0, 100}), (Timestamp{1, 0}));  // the epoch decides first
}

TEST(TimestampTest, Prints) {
  EXPECT_EQ((Timestamp{2, 17}).ToString(), "(2, 17)");
  std::ostringstream os;
  os << Timestamp{0, 3};
  EXPECT_EQ(os.str(), "(0, 3)");
  EXPECT_EQ(Timestamp().ToString(), "(0, 0)");
}

}  // namespace
}  // namespace nereid
