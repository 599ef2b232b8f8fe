// Cast between float32, int32 and int64 on the CPU kernels: truncation
// toward zero, exact integers both ways, and a refusal (not a wrapped value)
// for a float that no int32 holds. ONNX's own Cast node tests cast only
// among float16, bfloat16, float64 and strings, which Nereid does not
// compute in, so these cases are Cast's runtime check.

#include <cstdint>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/executor.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using testing::Attr;
using testing::InputNode;
using testing::OpNode;

// Runs Input x (of `from`) -> Cast(to) on `x`'s values and returns y.
absl::StatusOr<Tensor> CastThrough(const Tensor& x, const std::string& from, const std::string& to) {
  auto graph = testing::LoadText(InputNode("x", x.dims(), from) + OpNode("y", "Cast", {"x"}, Attr("to", "type: " + to)));
  if (!graph.ok()) return graph.status();
  auto executor = Executor::Create(graph->get(), ExecutorOptions{});
  if (!executor.ok()) return executor.status();
  StepInfo step;
  step.training = false;
  auto out = (*executor)->Evaluate(step, {{"x", x}}, {"y"});
  if (!out.ok()) return out.status();
  return (*out)[0];
}

template <typename T>
Tensor Of(DataType dtype, const std::vector<T>& values) {
  Tensor t = *Tensor::Allocate(dtype, {static_cast<int64_t>(values.size())});
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

TEST(Cast, FloatToIntegerTruncatesTowardZero) {
  auto y = CastThrough(Of<float>(DT_FLOAT, {2.7f, -2.7f, 0.5f, -0.0f, 7.0f}), "DT_FLOAT", "DT_INT32");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DT_INT32);
  EXPECT_THAT(Values<int32_t>(*y), ::testing::ElementsAre(2, -2, 0, 0, 7));
}

TEST(Cast, IntegersToFloatAndBetweenWidths) {
  auto f = CastThrough(Of<int64_t>(DT_INT64, {0, -3, 16777216}), "DT_INT64", "DT_FLOAT");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(Values<float>(*f), ::testing::ElementsAre(0.0f, -3.0f, 16777216.0f));
  auto wide = CastThrough(Of<int32_t>(DT_INT32, {-5, 2147483647}), "DT_INT32", "DT_INT64");
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_THAT(Values<int64_t>(*wide), ::testing::ElementsAre(-5, 2147483647));
}

TEST(Cast, ValuesOutsideTheIntegerAreRefusedNotWrapped) {
  auto y = CastThrough(Of<float>(DT_FLOAT, {1.0f, 3e9f}), "DT_FLOAT", "DT_INT32");
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), ::testing::HasSubstr("element 1 (3e+09) does not fit"));
  auto narrow = CastThrough(Of<int64_t>(DT_INT64, {int64_t{1} << 40}), "DT_INT64", "DT_INT32");
  ASSERT_FALSE(narrow.ok());
  auto nan = CastThrough(Of<float>(DT_FLOAT, {std::nanf("")}), "DT_FLOAT", "DT_INT64");
  ASSERT_FALSE(nan.ok());
}

TEST(Cast, ATargetOutsideTheThreeTypesIsRefusedAtLoad) {
  EXPECT_THAT(testing::LoadError(InputNode("x", {2}) + OpNode("y", "Cast", {"x"}, Attr("to", "type: DT_BOOL"))),
              ::testing::HasSubstr("Cast converts between float32, int32 and int64"));
}

}  // namespace
}  // namespace nereid
