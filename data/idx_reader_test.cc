#include "data/idx_reader.h"

#include <sys/stat.h>

#include <string>
#include <vector>

#include "data/gz_file.h"
#include "data/test_files.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

using ::nereid::data::testing::Bytes;
using ::nereid::data::testing::Gzip;
using ::nereid::data::testing::Idx;
using ::nereid::data::testing::TempPath;
using ::nereid::data::testing::WriteGz;
using ::nereid::data::testing::WritePlain;

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

// Three 2x3 images with pixels 0, 1, ..., 17 (the last one 255) and labels 2, 0, 9.
std::string SmallImages() {
  std::vector<int> px;
  for (int i = 0; i < 17; ++i) px.push_back(i);
  px.push_back(255);
  return Idx(kIdxUint8ImagesMagic, {3, 2, 3}, Bytes(px));
}
std::string SmallLabels() { return Idx(kIdxUint8LabelsMagic, {3}, Bytes({2, 0, 9})); }

void ExpectSmall(const Dataset& ds) {
  EXPECT_EQ(ds.num_examples, 3);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.height, 2);
  EXPECT_EQ(ds.width, 3);
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(ds.image_size(), 6);
  ASSERT_EQ(ds.images.size(), 18u);
  for (int i = 0; i < 17; ++i) EXPECT_FLOAT_EQ(ds.images[i], i / 255.0f) << i;
  EXPECT_EQ(ds.images[17], 1.0f);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{2, 0, 9}));
  EXPECT_TRUE(ds.Validate().ok()) << ds.Validate();
}

TEST(IdxReaderTest, GzipRoundTrip) {
  const std::string images = TempPath("rt-images.gz"), labels = TempPath("rt-labels.gz");
  WriteGz(images, SmallImages());
  WriteGz(labels, SmallLabels());
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectSmall(*ds);
  EXPECT_EQ(ds->name, "rt-images.gz");
}

TEST(IdxReaderTest, PlainRoundTrip) {
  const std::string images = TempPath("plain-images"), labels = TempPath("plain-labels");
  WritePlain(images, SmallImages());
  WritePlain(labels, SmallLabels());
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectSmall(*ds);
}

TEST(IdxReaderTest, BadImageMagicNamesFile) {
  const std::string images = TempPath("badmagic-images.gz"), labels = TempPath("ok-labels.gz");
  WriteGz(images, Idx(0, {3, 2, 3}, std::string(18, '\0')));
  WriteGz(labels, SmallLabels());
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), images + ": bad IDX magic 0x00000000 (expected 0x00000803 "
                                             "for uint8 images)"))
      << ds.status();
}

TEST(IdxReaderTest, SwappedFilesReportLabelsMagic) {
  const std::string images = TempPath("sw-images.gz"), labels = TempPath("sw-labels.gz");
  WriteGz(images, SmallImages());
  WriteGz(labels, SmallImages());  // an image file where the labels belong
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), labels + ": bad IDX magic 0x00000803 (expected 0x00000801 "
                                             "for uint8 labels)"))
      << ds.status();
}

TEST(IdxReaderTest, TruncatedPixelsReportHeaderAndBytes) {
  const std::string images = TempPath("trunc-images.gz"), labels = TempPath("trunc-labels.gz");
  WriteGz(images, Idx(kIdxUint8ImagesMagic, {60000, 28, 28}, std::string(1234, '\x07')));
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {60000}, std::string(60000, '\x03')));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(ds.status(), images +
                                        ": truncated: header says 60000 images of 28x28 but the "
                                        "file holds 1234 bytes of pixels"))
      << ds.status();
}

TEST(IdxReaderTest, TruncatedHeader) {
  const std::string images = TempPath("short-images.gz"), labels = TempPath("short-labels.gz");
  WriteGz(images, SmallImages().substr(0, 6));
  WriteGz(labels, SmallLabels());
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), images + ": truncated")) << ds.status();
}

TEST(IdxReaderTest, TruncatedLabels) {
  const std::string images = TempPath("tl-images.gz"), labels = TempPath("tl-labels.gz");
  WriteGz(images, SmallImages());
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {3}, Bytes({1})));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(),
                       labels + ": truncated: header says 3 labels but the file holds 1 bytes"))
      << ds.status();
}

TEST(IdxReaderTest, TruncatedGzipStream) {
  const std::string images = TempPath("cut-images.gz"), labels = TempPath("cut-labels.gz");
  std::string gz = Gzip(Idx(kIdxUint8ImagesMagic, {100, 28, 28}, std::string(78400, '\x11')));
  WritePlain(images, gz.substr(0, gz.size() / 2));
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {100}, std::string(100, '\x01')));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(ds.status(), images + ": truncated gzip stream (unexpected end of file)"))
      << ds.status();
}

TEST(IdxReaderTest, CorruptGzipStream) {
  const std::string images = TempPath("corrupt-images.gz"), labels = TempPath("corrupt-labels.gz");
  std::vector<int> px;
  for (int i = 0; i < 78400; ++i) px.push_back((i * 7919) % 251);
  std::string gz = Gzip(Idx(kIdxUint8ImagesMagic, {100, 28, 28}, Bytes(px)));
  std::string corrupt = gz;
  for (size_t i = 20; i < gz.size() - 20; i += 97) corrupt[i] = static_cast<char>(gz[i] ^ 0x5a);
  WritePlain(images, corrupt);
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {100}, std::string(100, '\x01')));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(ds.status(), images + ": corrupt gzip stream (")) << ds.status();

  // A flipped bit in the CRC trailer is caught too.
  std::string bad_crc = gz;
  bad_crc[gz.size() - 6] = static_cast<char>(bad_crc[gz.size() - 6] ^ 1);
  WritePlain(images, bad_crc);
  ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), images + ": corrupt gzip stream (incorrect data check)"))
      << ds.status();
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  const std::string labels = TempPath("mf-labels.gz");
  WriteGz(labels, SmallLabels());
  const std::string missing = TempPath("no-such-images.gz");
  absl::StatusOr<Dataset> ds = LoadIdx(missing, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(ds.status(), missing)) << ds.status();

  const std::string images = TempPath("mf-images.gz");
  WriteGz(images, SmallImages());
  ds = LoadIdx(images, TempPath("no-such-labels.gz"), 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(ds.status(), TempPath("no-such-labels.gz"))) << ds.status();
}

TEST(IdxReaderTest, DirectoryIsRejected) {
  const std::string dir = TempPath("a-directory");
  ::mkdir(dir.c_str(), 0755);
  absl::StatusOr<Dataset> ds = LoadIdx(dir, dir, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), dir + ": not a regular file")) << ds.status();
}

TEST(IdxReaderTest, LabelOutOfRangeNamesFileAndExample) {
  const std::string images = TempPath("lr-images.gz"), labels = TempPath("lr-labels.gz");
  WriteGz(images, SmallImages());
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {3}, Bytes({1, 2, 10})));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), labels + ": label 10 of example 2 is out of range [0, 10)"))
      << ds.status();
  // The same file is fine with 11 classes.
  EXPECT_TRUE(LoadIdx(images, labels, 11).ok());
}

TEST(IdxReaderTest, CountMismatch) {
  const std::string images = TempPath("cm-images.gz"), labels = TempPath("cm-labels.gz");
  WriteGz(images, SmallImages());
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {4}, Bytes({1, 2, 3, 4})));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(
      Contains(ds.status(), labels + ": header says 4 labels but " + images + " holds 3 images"))
      << ds.status();
}

TEST(IdxReaderTest, TrailingDataRejected) {
  const std::string images = TempPath("td-images.gz"), labels = TempPath("td-labels.gz");
  WriteGz(images, SmallImages() + "x");
  WriteGz(labels, SmallLabels());
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), images + ": trailing data")) << ds.status();
}

TEST(IdxReaderTest, HugeDeclaredSizeFailsWithoutAllocating) {
  const std::string images = TempPath("huge-images.gz"), labels = TempPath("huge-labels.gz");
  // 4 billion images of 60000x60000: rejected from the header alone.
  WriteGz(images, Idx(kIdxUint8ImagesMagic, {0xffffffffu, 60000, 60000}, "abc"));
  WriteGz(labels, SmallLabels());
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(ds.status(), images + ": header declares 4294967295 images")) << ds.status();

  // Rows or columns beyond 65536 are implausible whatever the count.
  WriteGz(images, Idx(kIdxUint8ImagesMagic, {1, 70000, 1}, "abc"));
  ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), images + ": implausible IDX header")) << ds.status();

  // A caller-supplied cap applies too.
  WriteGz(images, SmallImages());
  ds = LoadIdx(images, labels, 10, IdxLimits{0, 17});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kResourceExhausted);
}

// A limit reads the first examples only: what lies past them (here a
// truncated tail and a label out of range) is neither read nor checked.
TEST(IdxReaderTest, ALimitReadsTheFirstExamplesOnly) {
  const std::string images = TempPath("limit-images.gz"), labels = TempPath("limit-labels.gz");
  std::string px = SmallImages();
  px.resize(px.size() - 4);  // the third image is cut short
  WriteGz(images, px);
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {3}, Bytes({2, 0, 77})));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10, IdxLimits{2});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 2);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{2, 0}));
  ASSERT_EQ(ds->images.size(), 12u);
  EXPECT_FLOAT_EQ(ds->images[11], 11 / 255.0f);
  EXPECT_TRUE(ds->Validate().ok()) << ds->Validate();
  // Without the limit, the same files are refused.
  EXPECT_FALSE(LoadIdx(images, labels, 10).ok());
  // A limit past the count reads everything, with every check.
  WriteGz(images, SmallImages());
  WriteGz(labels, SmallLabels());
  ds = LoadIdx(images, labels, 10, IdxLimits{10});
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectSmall(*ds);
}

TEST(IdxReaderTest, ZeroDimensionsRejected) {
  const std::string images = TempPath("zero-images.gz"), labels = TempPath("zero-labels.gz");
  WriteGz(images, Idx(kIdxUint8ImagesMagic, {0, 28, 28}, ""));
  WriteGz(labels, Idx(kIdxUint8LabelsMagic, {0}, ""));
  absl::StatusOr<Dataset> ds = LoadIdx(images, labels, 10);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), images + ": implausible IDX header: 0 images of 28x28"))
      << ds.status();
}

TEST(IdxReaderTest, BadNumClasses) {
  EXPECT_EQ(LoadIdx("x", "y", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadIdx("x", "y", 257).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GzFileTest, ReadWholeFileHonoursCap) {
  const std::string path = TempPath("cap.gz");
  WriteGz(path, std::string(1000, 'z'));
  absl::StatusOr<std::vector<uint8_t>> all = ReadWholeFile(path, 1000);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 1000u);
  absl::StatusOr<std::vector<uint8_t>> capped = ReadWholeFile(path, 999);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(capped.status(), path + ": holds more than 999 bytes")) << capped.status();
}

TEST(GzFileTest, EmptyFile) {
  const std::string path = TempPath("empty");
  WritePlain(path, "");
  absl::StatusOr<std::vector<uint8_t>> all = ReadWholeFile(path);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
}

}  // namespace
}  // namespace data
}  // namespace nereid
