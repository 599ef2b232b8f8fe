// CausalMask's forward values: which scores each query keeps, square and
// with more keys than queries (the last queries of a longer context).

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/executor.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::InputNode;
using testing::OpNode;

std::vector<float> Masked(int64_t queries, int64_t keys) {
  auto graph = testing::LoadText(InputNode("s", {queries, keys}) + OpNode("y", "CausalMask", {"s"}, Attr("value", "f: -9")));
  EXPECT_TRUE(graph.ok()) << graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  EXPECT_TRUE(executor.ok()) << executor.status();
  std::vector<float> ones(queries * keys, 1.0f);
  StepInfo step;
  auto out = (*executor)->Evaluate(step, {{"s", *Tensor::FromVector({queries, keys}, ones)}}, {"y"});
  EXPECT_TRUE(out.ok()) << out.status();
  const float* y = (*out)[0].data<float>();
  return std::vector<float>(y, y + queries * keys);
}

TEST(CausalMask, EachQuerySeesItselfAndTheKeysBefore) {
  EXPECT_THAT(Masked(3, 3), ::testing::ElementsAre(1, -9, -9,  //
                                                   1, 1, -9,   //
                                                   1, 1, 1));
}

TEST(CausalMask, FewerQueriesAreTheLastPositions) {
  EXPECT_THAT(Masked(2, 4), ::testing::ElementsAre(1, 1, 1, -9,  //
                                                   1, 1, 1, 1));
}

}  // namespace
}  // namespace nereid
