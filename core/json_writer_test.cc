#include "core/json_writer.h"

#include <cmath>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(JsonWriterTest, NestsAndSeparates) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a");
  w.Int(1);
  w.Key("b");
  w.BeginArray();
  w.Double(0.5);
  w.Bool(true);
  w.Null();
  w.BeginObject();
  w.EndObject();
  w.EndArray();
  w.Key("c");
  w.String("x\"y\n\x01");
  w.EndObject();
  EXPECT_EQ(w.Take(), "{\"a\":1,\"b\":[0.5,true,null,{}],\"c\":\"x\\\"y\\n\\u0001\"}\n");
}

TEST(JsonWriterTest, NonFiniteBecomesNull) {
  JsonWriter w;
  w.BeginArray();
  w.Double(std::nan(""));
  w.Double(INFINITY);
  w.EndArray();
  EXPECT_EQ(w.Take(), "[null,null]\n");
}

}  // namespace
}  // namespace nereid
