#include "core/tensor_slice.h"

#include <algorithm>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor Iota(std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return *Tensor::FromVector(dims, v);
}

std::vector<float> Values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.num_elements()}; }

TEST(TensorSliceTest, RowsOfAMatrix) {
  // [[0 1 2] [3 4 5] [6 7 8] [9 10 11]] cut into two blocks of rows.
  absl::StatusOr<Tensor> second = SliceAlongAxis(Iota({4, 3}), 0, 1, 2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(second->dims(), ElementsAre(2, 3));
  EXPECT_THAT(Values(*second), ElementsAre(6, 7, 8, 9, 10, 11));
}

TEST(TensorSliceTest, ColumnsOfAMatrix) {
  absl::StatusOr<Tensor> first = SliceAlongAxis(Iota({2, 4}), 1, 0, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->dims(), ElementsAre(2, 2));
  EXPECT_THAT(Values(*first), ElementsAre(0, 1, 4, 5));
  absl::StatusOr<Tensor> last = SliceAlongAxis(Iota({2, 4}), 1, 3, 4);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(Values(*last), ElementsAre(3, 7));
}

TEST(TensorSliceTest, TheBlocksTogetherAreTheWhole) {
  Tensor full = Iota({2, 6, 2});
  std::vector<float> seen;
  for (int b = 0; b < 3; ++b) {
    absl::StatusOr<Tensor> part = SliceAlongAxis(full, 1, b, 3);
    ASSERT_TRUE(part.ok());
    EXPECT_THAT(part->dims(), ElementsAre(2, 2, 2));
    for (float v : Values(*part)) seen.push_back(v);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, Values(full));
}

TEST(TensorSliceTest, RefusesWhatDoesNotDivide) {
  EXPECT_THAT(std::string(SliceAlongAxis(Iota({5, 2}), 0, 0, 2).status().message()),
              HasSubstr("cannot be cut into 2 equal blocks"));
  EXPECT_THAT(std::string(SliceAlongAxis(Iota({4}), 1, 0, 2).status().message()), HasSubstr("axis 1 is outside"));
  EXPECT_THAT(std::string(SliceAlongAxis(Iota({4}), 0, 2, 2).status().message()), HasSubstr("block 2 is outside"));
}

}  // namespace
}  // namespace nereid
