#include "data/dataset.h"

#include <cmath>
#include <string>
#include <vector>

#include "data/normalize.h"
#include "data/synthetic.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

Dataset Tiny() {
  Dataset ds;
  ds.name = "tiny";
  ds.num_examples = 2;
  ds.channels = 2;
  ds.height = 1;
  ds.width = 2;
  ds.num_classes = 3;
  ds.images = {1, 2, 3, 4, 5, 6, 7, 8};
  ds.labels = {0, 2};
  return ds;
}

TEST(DatasetTest, ValidateAcceptsConsistentAndRejectsInconsistent) {
  Dataset ds = Tiny();
  EXPECT_EQ(ds.image_size(), 4);
  EXPECT_TRUE(ds.Validate().ok()) << ds.Validate();

  Dataset bad_label = Tiny();
  bad_label.labels[1] = 3;
  EXPECT_TRUE(Contains(bad_label.Validate(), "dataset 'tiny': label 3 of example 1"))
      << bad_label.Validate();

  Dataset short_images = Tiny();
  short_images.images.pop_back();
  EXPECT_FALSE(short_images.Validate().ok());

  Dataset few_labels = Tiny();
  few_labels.labels.pop_back();
  EXPECT_FALSE(few_labels.Validate().ok());

  Dataset zero_width = Tiny();
  zero_width.width = 0;
  EXPECT_FALSE(zero_width.Validate().ok());

  Dataset overflow = Tiny();
  overflow.channels = overflow.height = overflow.width = int64_t{1} << 40;
  EXPECT_FALSE(overflow.Validate().ok());
}

TEST(DatasetTest, Truncate) {
  Dataset ds = Tiny();
  ds.Truncate(0);
  EXPECT_EQ(ds.num_examples, 2);
  ds.Truncate(5);
  EXPECT_EQ(ds.num_examples, 2);
  ds.Truncate(1);
  EXPECT_EQ(ds.num_examples, 1);
  EXPECT_EQ(ds.images, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{0}));
  EXPECT_TRUE(ds.Validate().ok());
}

TEST(NormalizeTest, PerChannel) {
  Dataset ds = Tiny();
  ASSERT_TRUE(NormalizePerChannel(&ds, {1, 3}, {2, 4}).ok());
  // Example 0: channel 0 {1,2}, channel 1 {3,4}; example 1: {5,6}, {7,8}.
  const std::vector<float> expected = {0, 0.5f, 0, 0.25f, 2, 2.5f, 1, 1.25f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(ds.images[i], expected[i]) << i;
}

TEST(NormalizeTest, RejectsWrongSizesAndBadStddev) {
  Dataset ds = Tiny();
  const std::vector<float> before = ds.images;
  absl::Status s = NormalizePerChannel(&ds, {0}, {1, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "got 1 means and 2 stddevs for 2 channels")) << s;
  EXPECT_FALSE(NormalizePerChannel(&ds, {0, 0}, {1, 0}).ok());
  EXPECT_FALSE(NormalizePerChannel(&ds, {0, NAN}, {1, 1}).ok());
  EXPECT_FALSE(NormalizePerChannel(nullptr, {0, 0}, {1, 1}).ok());
  EXPECT_EQ(ds.images, before);
}

TEST(SyntheticTest, DeterministicFromSeed) {
  Dataset a = MakeSynthetic(50, 2, 3, 4, 5, /*seed=*/7);
  Dataset b = MakeSynthetic(50, 2, 3, 4, 5, /*seed=*/7);
  Dataset c = MakeSynthetic(50, 2, 3, 4, 5, /*seed=*/8);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_EQ(a.num_examples, 50);
  EXPECT_EQ(a.image_size(), 24);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.images, c.images);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.labels[i], i % 5);
  // Pinned values: a change here changes every synthetic experiment.
  Dataset pinned = MakeSynthetic(1, 1, 1, 2, 1, /*seed=*/0);
  ASSERT_EQ(pinned.images.size(), 2u);
  EXPECT_FLOAT_EQ(pinned.images[0], -0.0833250433f);
  EXPECT_FLOAT_EQ(pinned.images[1], -0.668471158f);
}

TEST(SyntheticTest, NonPositiveArgumentsGiveEmptyDataset) {
  Dataset ds = MakeSynthetic(0, 1, 2, 2, 3, 1);
  EXPECT_EQ(ds.num_examples, 0);
  EXPECT_TRUE(ds.images.empty());
  EXPECT_FALSE(MakeSynthetic(10, 1, 2, 2, 0, 1).Validate().ok());
}

// Nearest-class-mean fitted on draw 0 classifies draw 1 almost perfectly:
// the data is learnable and the test split shares the training prototypes.
TEST(SyntheticTest, LearnableAndTestSplitGeneralises) {
  const int64_t n = 400, c = 1, h = 4, w = 4;
  const int k = 10;
  Dataset train = MakeSynthetic(n, c, h, w, k, /*seed=*/3, /*draw=*/0);
  Dataset test = MakeSynthetic(n, c, h, w, k, /*seed=*/3, /*draw=*/1);
  EXPECT_NE(train.images, test.images);
  const int64_t d = train.image_size();
  std::vector<double> means(static_cast<size_t>(k * d), 0.0);
  std::vector<int> counts(k, 0);
  for (int64_t i = 0; i < n; ++i) {
    ++counts[train.labels[i]];
    for (int64_t j = 0; j < d; ++j) means[train.labels[i] * d + j] += train.images[i * d + j];
  }
  for (int cls = 0; cls < k; ++cls) {
    for (int64_t j = 0; j < d; ++j) means[cls * d + j] /= counts[cls];
  }
  int correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int best = -1;
    double best_dist = 0;
    for (int cls = 0; cls < k; ++cls) {
      double dist = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double diff = test.images[i * d + j] - means[cls * d + j];
        dist += diff * diff;
      }
      if (best < 0 || dist < best_dist) {
        best = cls;
        best_dist = dist;
      }
    }
    correct += best == test.labels[i];
  }
  EXPECT_GE(correct, n * 95 / 100) << correct << " of " << n;
}

}  // namespace
}  // namespace data
}  // namespace nereid
