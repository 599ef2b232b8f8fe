// Slice's forward values, and that a slice which is one contiguous block of
// its input (whole rows) shares the input's buffer instead of copying it,
// while other slices (columns, strided rows) copy.

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/executor.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::InputNode;
using testing::OpNode;

struct Sliced {
  Tensor x;  // the value fed
  Tensor y;  // the slice
};

// x = 0, 1, ..., 11 as [4, 3], sliced with these attributes.
Sliced SliceOfRange(const std::string& attrs) {
  auto graph = testing::LoadText(InputNode("x", {4, 3}) + OpNode("y", "Slice", {"x"}, attrs));
  EXPECT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  EXPECT_TRUE(executor.ok()) << executor.status();
  std::vector<float> values(12);
  for (int i = 0; i < 12; ++i) values[i] = static_cast<float>(i);
  Sliced s{*Tensor::FromVector({4, 3}, values), Tensor()};
  StepInfo step;
  auto out = (*executor)->Evaluate(step, {{"x", s.x}}, {"y"});
  EXPECT_TRUE(out.ok()) << out.status();
  s.y = (*out)[0];
  return s;
}

std::vector<float> Values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.num_elements()}; }

bool Inside(const Tensor& part, const Tensor& whole) {
  return part.data<float>() >= whole.data<float>() && part.data<float>() < whole.data<float>() + whole.num_elements();
}

TEST(Slice, WholeRowsShareTheInputsBuffer) {
  Sliced s = SliceOfRange(Attr("axis", "i: 0") + Attr("begin", "i: 1") + Attr("size", "i: 2"));
  EXPECT_THAT(s.y.dims(), ::testing::ElementsAre(2, 3));
  EXPECT_THAT(Values(s.y), ::testing::ElementsAre(3, 4, 5, 6, 7, 8));
  EXPECT_EQ(s.y.data<float>(), s.x.data<float>() + 3);  // no copy
}

TEST(Slice, TheSharedBufferOutlivesTheInput) {
  Sliced s = SliceOfRange(Attr("axis", "i: 0") + Attr("begin", "i: 2") + Attr("size", "i: 2"));
  s.x = Tensor();  // the feed and the executor are gone; the slice keeps the buffer
  EXPECT_THAT(Values(s.y), ::testing::ElementsAre(6, 7, 8, 9, 10, 11));
}

TEST(Slice, ColumnsAreCopied) {
  Sliced s = SliceOfRange(Attr("axis", "i: 1") + Attr("begin", "i: 1") + Attr("size", "i: 2"));
  EXPECT_THAT(Values(s.y), ::testing::ElementsAre(1, 2, 4, 5, 7, 8, 10, 11));
  EXPECT_FALSE(Inside(s.y, s.x));
}

TEST(Slice, StridedRowsAreCopied) {
  Sliced s = SliceOfRange(Attr("axis", "i: 0") + Attr("begin", "i: 0") + Attr("size", "i: 2") +
                          Attr("stride", "i: 2"));
  EXPECT_THAT(Values(s.y), ::testing::ElementsAre(0, 1, 2, 6, 7, 8));
  EXPECT_FALSE(Inside(s.y, s.x));
}

}  // namespace
}  // namespace nereid
