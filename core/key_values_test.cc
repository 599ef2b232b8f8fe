#include "core/key_values.h"

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(KeyValuesTest, ParsesInOrderAndFormatsBack) {
  auto items = ParseKeyValues("scheme=mds, n=4,,k=2", ',', "coded attribute");
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ(*items, (KeyValues{{"scheme", "mds"}, {"n", "4"}, {"k", "2"}}));
  EXPECT_EQ(FormatKeyValues(*items, ','), "scheme=mds,n=4,k=2");
  auto groups = ParseKeyValues("rows=blocks:2;cols=ranks:0-1", ';', "group declaration");
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ((*groups)[1], (std::pair<std::string, std::string>{"cols", "ranks:0-1"}));
  auto with_eq = ParseKeyValues("expr=a=b", ';', "x");
  ASSERT_TRUE(with_eq.ok());
  EXPECT_EQ((*with_eq)[0].second, "a=b");
}

TEST(KeyValuesTest, AnItemWithoutAKeyIsNamed) {
  EXPECT_EQ(ParseKeyValues("n=4,oops", ',', "coded attribute").status().message(),
            "coded attribute 'oops' is not key=value");
  EXPECT_EQ(ParseKeyValues("=4", ',', "codec option").status().message(), "codec option '=4' is not key=value");
  EXPECT_TRUE(ParseKeyValues("", ';', "x")->empty());
}

}  // namespace
}  // namespace nereid
