#include "data/cifar_reader.h"

#include <string>
#include <vector>

#include "data/test_files.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

using ::nereid::data::testing::CifarRecord;
using ::nereid::data::testing::TempPath;
using ::nereid::data::testing::WriteGz;
using ::nereid::data::testing::WritePlain;

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

TEST(CifarReaderTest, ReadsRecordsAcrossFiles) {
  const std::string a = TempPath("cifar_a.bin"), b = TempPath("cifar_b.bin.gz");
  WritePlain(a, CifarRecord(3, 0) + CifarRecord(9, 100));
  WriteGz(b, CifarRecord(0, 7));
  absl::StatusOr<Dataset> ds = LoadCifar10({a, b});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 3);
  EXPECT_EQ(ds->channels, 3);
  EXPECT_EQ(ds->height, 32);
  EXPECT_EQ(ds->width, 32);
  EXPECT_EQ(ds->num_classes, 10);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{3, 9, 0}));
  ASSERT_EQ(ds->images.size(), 3u * 3072u);
  // CHW order is kept: image 1, channel 2 (blue), row 1, column 5.
  const int64_t offset = 1 * 3072 + 2 * 1024 + 1 * 32 + 5;
  EXPECT_FLOAT_EQ(ds->images[offset], ((100 + 2 * 1024 + 32 + 5) % 256) / 255.0f);
  EXPECT_FLOAT_EQ(ds->images[2 * 3072 + 3071], ((7 + 3071) % 256) / 255.0f);
  EXPECT_TRUE(ds->Validate().ok());
}

TEST(CifarReaderTest, WrongSizeRejected) {
  const std::string path = TempPath("cifar_bad_size.bin");
  WritePlain(path, CifarRecord(1, 0) + CifarRecord(2, 0) + "xyz");
  absl::StatusOr<Dataset> ds = LoadCifar10({path});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), path + ": size 6149 bytes is not a positive multiple of 3073"))
      << ds.status();
}

TEST(CifarReaderTest, EmptyFileRejected) {
  const std::string path = TempPath("cifar_empty.bin");
  WritePlain(path, "");
  absl::StatusOr<Dataset> ds = LoadCifar10({path});
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), path + ": size 0 bytes")) << ds.status();
}

TEST(CifarReaderTest, LabelOutOfRangeNamesFileAndRecord) {
  const std::string good = TempPath("cifar_good.bin"), bad = TempPath("cifar_bad_label.bin");
  WritePlain(good, CifarRecord(1, 0));
  WritePlain(bad, CifarRecord(1, 0) + CifarRecord(10, 0));
  absl::StatusOr<Dataset> ds = LoadCifar10({good, bad});
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), bad + ": label 10 of record 1 is out of range [0, 10)"))
      << ds.status();
}

TEST(CifarReaderTest, MissingFileAndNoFiles) {
  const std::string missing = TempPath("cifar_missing.bin");
  absl::StatusOr<Dataset> ds = LoadCifar10({missing});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(ds.status(), missing)) << ds.status();
  EXPECT_EQ(LoadCifar10({}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace nereid
