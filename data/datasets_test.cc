#include "data/datasets.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/test_files.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

using ::nereid::data::testing::Bytes;
using ::nereid::data::testing::CifarRecord;
using ::nereid::data::testing::Idx;
using ::nereid::data::testing::TempPath;
using ::nereid::data::testing::WriteGz;
using ::nereid::data::testing::WritePlain;

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

std::string MakeDir(const std::string& name) {
  const std::string dir = TempPath(name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

// A fake Fashion-MNIST directory: 4 test images of 2x2 with pixel value 51
// (0.2 after /255), labels 0..3.
std::string FakeFashionMnist() {
  const std::string dir = MakeDir("fake-fashion");
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", Idx(0x803, {4, 2, 2}, std::string(16, '\x33')));
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", Idx(0x801, {4}, Bytes({0, 1, 2, 3})));
  return dir;
}

TEST(DatasetsTest, UnknownNameListsKnownOnes) {
  absl::StatusOr<Dataset> ds = LoadNamedDataset("imagenet", Split::kTrain, {});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "unknown dataset 'imagenet'; known: cifar10, csv:DIR, fashion-mnist, fortunes, npy:DIR, synthetic, text:PATH"))
      << ds.status();
}

TEST(DatasetsTest, FashionMnistFromDirIsNormalised) {
  DatasetOptions opts;
  opts.dir = FakeFashionMnist();
  absl::StatusOr<Dataset> ds = LoadNamedDataset("fashion-mnist", Split::kTest, opts);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->name, "fashion-mnist/test");
  EXPECT_EQ(ds->num_examples, 4);
  EXPECT_EQ(ds->num_classes, 10);
  for (float v : ds->images) EXPECT_NEAR(v, (51 / 255.0f - 0.2860f) / 0.3530f, 1e-6);

  opts.limit = 3;
  ds = LoadNamedDataset("fashion-mnist", Split::kTest, opts);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 3);
  EXPECT_EQ(ds->images.size(), 12u);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1, 2}));
}

TEST(DatasetsTest, NormalizationIsExplicit) {
  DatasetOptions opts;
  opts.dir = FakeFashionMnist();
  absl::StatusOr<Dataset> ds = LoadNamedDataset("fashion-mnist", Split::kTest, opts);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->normalization, "(x - 0.286) / 0.353");

  absl::StatusOr<NormalizationSpec> none = ParseNormalization("none");
  ASSERT_TRUE(none.ok()) << none.status();
  opts.normalize = *none;
  ds = LoadNamedDataset("fashion-mnist", Split::kTest, opts);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->normalization, "none");
  for (float v : ds->images) EXPECT_NEAR(v, 51 / 255.0f, 1e-7);

  absl::StatusOr<NormalizationSpec> half = ParseNormalization("0.5/0.25");
  ASSERT_TRUE(half.ok()) << half.status();
  opts.normalize = *half;
  ds = LoadNamedDataset("fashion-mnist", Split::kTest, opts);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->normalization, "(x - 0.5) / 0.25");
  for (float v : ds->images) EXPECT_NEAR(v, (51 / 255.0f - 0.5f) / 0.25f, 1e-6);

  // Three channels' values for a one-channel dataset: an error naming both.
  absl::StatusOr<NormalizationSpec> three = ParseNormalization("0.1,0.2,0.3/1,1,1");
  ASSERT_TRUE(three.ok()) << three.status();
  opts.normalize = *three;
  ds = LoadNamedDataset("fashion-mnist", Split::kTest, opts);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), "3 means and stddevs for 'fashion-mnist/test', which has 1 channels")) << ds.status();
}

TEST(DatasetsTest, BadNormalizationTextIsRefused) {
  EXPECT_TRUE(ParseNormalization("default").ok());
  EXPECT_TRUE(ParseNormalization("").ok());
  for (const char* bad : {"zscore", "0.5", "0.5/0", "0.5/-1", "a/1", "1,2/3", "0.1/0.2/0.3", "nan/1"}) {
    absl::StatusOr<NormalizationSpec> spec = ParseNormalization(bad);
    EXPECT_FALSE(spec.ok()) << bad;
    EXPECT_TRUE(Contains(spec.status(), std::string("--normalize '") + bad + "'")) << spec.status();
  }
}

TEST(DatasetsTest, FashionMnistDirFromEnvironment) {
  const std::string dir = FakeFashionMnist();
  ASSERT_EQ(::setenv("NEREID_FASHION_MNIST_DIR", dir.c_str(), 1), 0);
  absl::StatusOr<Dataset> ds = LoadNamedDataset("fashion-mnist", Split::kTest, {});
  ::unsetenv("NEREID_FASHION_MNIST_DIR");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 4);
}

TEST(DatasetsTest, FashionMnistMissingFileSaysWhereToGetIt) {
  DatasetOptions opts;
  opts.dir = FakeFashionMnist();  // has no train files
  absl::StatusOr<Dataset> ds = LoadNamedDataset("fashion-mnist", Split::kTrain, opts);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(ds.status(), opts.dir + "/train-images-idx3-ubyte.gz: no such file"))
      << ds.status();
  EXPECT_TRUE(Contains(ds.status(), "install Debian's dataset-fashion-mnist (./setup.sh does)"))
      << ds.status();
}

TEST(DatasetsTest, Cifar10FromDir) {
  const std::string dir = MakeDir("fake-cifar");
  WritePlain(dir + "/test_batch.bin", CifarRecord(4, 0) + CifarRecord(5, 1));
  DatasetOptions opts;
  opts.dir = dir;
  absl::StatusOr<Dataset> ds = LoadNamedDataset("cifar10", Split::kTest, opts);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->name, "cifar10/test");
  EXPECT_EQ(ds->num_examples, 2);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{4, 5}));
  // Record 0, green channel, pixel 0 holds (0 + 1024) % 256 = 0.
  EXPECT_NEAR(ds->images[1024], (0.0f - 0.4822f) / 0.2435f, 1e-6);

  absl::StatusOr<Dataset> train = LoadNamedDataset("cifar10", Split::kTrain, opts);
  ASSERT_FALSE(train.ok());
  EXPECT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(train.status(), dir + "/data_batch_1.bin: no such file")) << train.status();
}

TEST(DatasetsTest, SyntheticShapeSeedAndLimit) {
  DatasetOptions opts;
  opts.channels = 3;
  opts.height = 4;
  opts.width = 5;
  opts.num_classes = 7;
  opts.num_examples = 30;
  opts.seed = 11;
  absl::StatusOr<Dataset> train = LoadNamedDataset("synthetic", Split::kTrain, opts);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->name, "synthetic/train");
  EXPECT_EQ(train->num_examples, 30);
  EXPECT_EQ(train->image_size(), 60);
  EXPECT_EQ(train->num_classes, 7);
  EXPECT_TRUE(train->Validate().ok());

  absl::StatusOr<Dataset> test = LoadNamedDataset("synthetic", Split::kTest, opts);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_NE(train->images, test->images);

  opts.limit = 8;
  absl::StatusOr<Dataset> limited = LoadNamedDataset("synthetic", Split::kTrain, opts);
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(limited->num_examples, 8);
  EXPECT_TRUE(std::equal(limited->images.begin(), limited->images.end(), train->images.begin()));
}

TEST(DatasetsTest, BadOptions) {
  DatasetOptions opts;
  opts.limit = -1;
  EXPECT_EQ(LoadNamedDataset("synthetic", Split::kTrain, opts).status().code(),
            absl::StatusCode::kInvalidArgument);
  opts.limit = 0;
  opts.width = 0;
  EXPECT_EQ(LoadNamedDataset("synthetic", Split::kTrain, opts).status().code(),
            absl::StatusCode::kInvalidArgument);
  opts.width = 60000;
  opts.height = 60000;
  EXPECT_EQ(LoadNamedDataset("synthetic", Split::kTrain, opts).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// The real Fashion-MNIST test split from Debian's dataset-fashion-mnist.
TEST(DatasetsTest, RealFashionMnistTestSplit) {
  const char* env = std::getenv("NEREID_FASHION_MNIST_DIR");
  const std::string dir =
      env != nullptr && env[0] != '\0' ? env : "/usr/share/datasets/fashion-mnist";
  struct stat st;
  if (::stat((dir + "/t10k-images-idx3-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP() << dir << " has no Fashion-MNIST; install Debian's dataset-fashion-mnist";
  }
  absl::StatusOr<Dataset> ds = LoadNamedDataset("fashion-mnist", Split::kTest, {});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 10000);
  EXPECT_EQ(ds->channels, 1);
  EXPECT_EQ(ds->height, 28);
  EXPECT_EQ(ds->width, 28);
  std::vector<int> histogram(10, 0);
  for (int32_t label : ds->labels) ++histogram[label];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
  double sum = 0, sum_sq = 0;
  for (float v : ds->images) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / ds->images.size();
  const double stddev = std::sqrt(sum_sq / ds->images.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(stddev, 1.0, 0.03);
}

}  // namespace
}  // namespace data
}  // namespace nereid
