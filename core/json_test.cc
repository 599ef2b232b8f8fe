#include "core/json.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(JsonTest, KeysKeepTheirOrderOnOneLine) {
  Json j;
  j["zeta"] = 1;
  j["alpha"] = "a";
  j["mid"] = Json::array({1.5, 2});
  EXPECT_EQ(JsonLine(j), "{\"zeta\":1,\"alpha\":\"a\",\"mid\":[1.5,2]}\n");
}

TEST(JsonTest, NonFiniteNumbersBecomeNull) {
  Json j;
  j["loss"] = std::nan("");
  j["rate"] = INFINITY;
  EXPECT_EQ(JsonLine(j), "{\"loss\":null,\"rate\":null}\n");
}

TEST(JsonTest, BytesThatAreNotUtf8AreReplacedNotThrown) {
  Json j;
  j["path"] = std::string("models/\xff\xfe.pbtxt");
  EXPECT_EQ(JsonLine(j), "{\"path\":\"models/\xEF\xBF\xBD\xEF\xBF\xBD.pbtxt\"}\n");
  EXPECT_EQ(JsonQuoted("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
}

}  // namespace
}  // namespace nereid
