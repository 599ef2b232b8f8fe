// The user's own data: csv:DIR and npy:DIR, and their errors.

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/npz_file.h"
#include "data/batch_loader.h"
#include "data/csv_dataset.h"
#include "data/npz_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

std::string Dir(const std::string& name) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CsvDataset, ReadsFeaturesAndTheLabelColumn) {
  const std::string dir = Dir("csv_header");
  Write(dir + "/train.csv", "x1, label ,x2\n0.5,1,2\n-1,0,3.25\n\n1e-3,2,0\n");
  absl::StatusOr<Dataset> ds = LoadCsvDataset(dir, "train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 3);
  EXPECT_EQ(ds->image_size(), 2);
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(ds->images, (std::vector<float>{0.5f, 2, -1, 3.25f, 1e-3f, 0}));
}

TEST(CsvDataset, WithoutAHeaderTheLastColumnIsTheLabel) {
  const std::string dir = Dir("csv_plain");
  Write(dir + "/test.csv", "1,2,0\r\n3,4,1\r\n");
  absl::StatusOr<Dataset> ds = LoadCsvDataset(dir, "test");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ds->images, (std::vector<float>{1, 2, 3, 4}));
}

// The peak resident memory since the last reset (VmHWM), in bytes.
int64_t PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kb = 0;
  while (status >> key) {
    if (key == "VmHWM:") {
      status >> kb;
      return kb * 1024;
    }
  }
  return -1;
}

// One 10 MB line used to cost about 300 MB before it was refused: now the
// line is refused once 1 MiB of it has been read.
TEST(CsvDataset, AHugeLineIsRefusedWithinTheLineBound) {
  const std::string dir = Dir("csv_huge_line");
  {
    std::string line;
    for (int i = 0; i < 5'000'000; ++i) line += "1,";
    line += "0\n";
    Write(dir + "/train.csv", line);
  }
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
  const int64_t before = PeakResidentBytes();
  absl::Status status = LoadCsvDataset(dir, "train").status();
  const int64_t grown = PeakResidentBytes() - before;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("train.csv:1: a line longer than 1048576 bytes"), std::string::npos) << status;
  EXPECT_LE(grown, int64_t{8} << 20) << "reading the line grew the peak by " << grown << " bytes";
}

TEST(CsvDataset, ErrorsNameTheRowAndColumn) {
  const std::string dir = Dir("csv_bad");
  auto error = [&](const std::string& text) {
    Write(dir + "/train.csv", text);
    return std::string(LoadCsvDataset(dir, "train").status().message());
  };
  EXPECT_NE(error("1,2,0\n3,4\n").find("train.csv:2: 2 columns, expected 3"), std::string::npos);
  EXPECT_NE(error("1,2,0\n3,x,1\n").find("train.csv:2: column 2 is 'x', not a finite number"), std::string::npos);
  EXPECT_NE(error("1,nan,0\n").find("not a finite number"), std::string::npos);
  EXPECT_NE(error("1,2,0.5\n").find("label '0.5' is not a class number"), std::string::npos);
  EXPECT_NE(error("a,b\n1,2\n").find("no column named 'label'"), std::string::npos);
  EXPECT_EQ(LoadCsvDataset(dir, "test").status().code(), absl::StatusCode::kNotFound);
}

TEST(NpzDataset, ReadsImagesAndLabels) {
  const std::string dir = Dir("npz_ok");
  Tensor images = *Tensor::FromVector({2, 1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor labels = *Tensor::Allocate(DT_INT64, {2});
  labels.data<int64_t>()[0] = 3;
  labels.data<int64_t>()[1] = 0;
  ASSERT_TRUE(WriteNpz(dir + "/train.npz", {{"images", images}, {"labels", labels}}).ok());
  absl::StatusOr<Dataset> ds = LoadNpzDataset(dir, "train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 2);
  EXPECT_EQ(ds->height, 2);
  EXPECT_EQ(ds->num_classes, 4);
  EXPECT_EQ(ds->images[7], 8);
}

// A tagger's or a language model's targets: [N, T] labels, one per
// position, -100 where a position is ignored; batches carry them per example.
TEST(NpzDataset, ReadsOneLabelPerPositionAndBatchesThem) {
  const std::string dir = Dir("npz_sequence");
  Tensor ids = *Tensor::Allocate(DT_INT64, {3, 4});
  Tensor labels = *Tensor::Allocate(DT_INT64, {3, 4});
  for (int i = 0; i < 12; ++i) {
    ids.data<int64_t>()[i] = i;
    labels.data<int64_t>()[i] = i % 4 == 3 ? kIgnoredLabel : i % 5;
  }
  ASSERT_TRUE(WriteNpz(dir + "/train.npz", {{"images", ids}, {"labels", labels}}).ok());
  absl::StatusOr<Dataset> ds = LoadNpzDataset(dir, "train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->labels_per_example, 4);
  EXPECT_EQ(ds->num_classes, 5);
  auto shared = std::make_shared<const Dataset>(*ds);
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.shuffle = false;
  auto loader = BatchLoader::Create(shared, lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  (*loader)->StartEpoch(0);
  std::optional<Batch> first = (*loader)->Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->labels_per_example, 4);
  EXPECT_THAT(first->labels, ::testing::ElementsAre(0, 1, 2, kIgnoredLabel, 4, 0, 1, kIgnoredLabel));

  Tensor bad = *labels.Clone();
  bad.data<int64_t>()[5] = -7;
  ASSERT_TRUE(WriteNpz(dir + "/train.npz", {{"images", ids}, {"labels", bad}}).ok());
  EXPECT_THAT(std::string(LoadNpzDataset(dir, "train").status().message()),
              ::testing::HasSubstr("label 5 is -7; labels are class numbers from 0 (-100: a position to ignore)"));
}

TEST(NpzDataset, RefusesMismatchedOrNonFiniteArrays) {
  const std::string dir = Dir("npz_bad");
  Tensor images = *Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, std::nanf("")});
  Tensor labels = *Tensor::Allocate(DT_INT32, {3});
  for (int i = 0; i < 3; ++i) labels.data<int32_t>()[i] = i;
  ASSERT_TRUE(WriteNpz(dir + "/train.npz", {{"images", images}, {"labels", labels}}).ok());
  EXPECT_NE(LoadNpzDataset(dir, "train").status().message().find("one label per example"), std::string::npos);
  Tensor two = *Tensor::Allocate(DT_INT32, {2});
  two.data<int32_t>()[0] = two.data<int32_t>()[1] = 0;
  ASSERT_TRUE(WriteNpz(dir + "/train.npz", {{"images", images}, {"labels", two}}).ok());
  EXPECT_NE(LoadNpzDataset(dir, "train").status().message().find("element 5 is nan"), std::string::npos);
}

}  // namespace
}  // namespace data
}  // namespace nereid
