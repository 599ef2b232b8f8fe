// Text as windows of byte ids with next-byte labels: the split, the shift by
// one, a directory's files in order without fortune indexes or links, and
// the errors.

#include "data/text_dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "data/datasets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(TextDataset, WindowsOfIdsWithTheNextCharacterAsLabels) {
  const std::string dir = Dir("text_one");
  // 100 bytes: the first 90 train, the last 10 test.
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  ASSERT_TRUE(WriteFileAtomically(dir + "/corpus.txt", text).ok());
  absl::StatusOr<Dataset> train = LoadTextDataset(dir + "/corpus.txt", "train", 8);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples, (90 - 1) / 8);
  EXPECT_EQ(train->labels_per_example, 8);
  EXPECT_EQ(train->num_classes, 256);
  EXPECT_EQ(train->width, 8);
  for (int64_t i = 0; i < train->num_examples * 8; ++i) {
    ASSERT_EQ(train->images[i], static_cast<float>(text[i])) << i;
    ASSERT_EQ(train->labels[i], text[i + 1]) << i;
  }
  absl::StatusOr<Dataset> test = LoadTextDataset(dir + "/corpus.txt", "test", 4);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, (10 - 1) / 4);
  EXPECT_EQ(test->images[0], static_cast<float>(text[90]));
  EXPECT_EQ(test->labels[0], text[91]);
}

TEST(TextDataset, ADirectoryReadsItsTextFilesInOrder) {
  const std::string dir = Dir("text_dir");
  ASSERT_TRUE(WriteFileAtomically(dir + "/b", std::string(50, 'b')).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/a", std::string(50, 'a')).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/a.dat", std::string(500, 'x')).ok());  // a fortune index
  unlink((dir + "/a.u8").c_str());
  ASSERT_EQ(symlink("a", (dir + "/a.u8").c_str()), 0);
  absl::StatusOr<Dataset> train = LoadTextDataset(dir, "train", 10);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->num_examples, (90 - 1) / 10);
  EXPECT_EQ(train->images[0], 'a');
  EXPECT_EQ(train->images[50], 'b');
  EXPECT_EQ(train->labels[49], 'b');
}

TEST(TextDataset, ErrorsSayWhatIsMissing) {
  const std::string dir = Dir("text_bad");
  ASSERT_TRUE(WriteFileAtomically(dir + "/short.txt", "tiny").ok());
  EXPECT_THAT(std::string(LoadTextDataset(dir + "/short.txt", "train", 0).status().message()),
              ::testing::HasSubstr("images Input must be [-1, T]"));
  EXPECT_THAT(std::string(LoadTextDataset(dir + "/short.txt", "test", 8).status().message()),
              ::testing::HasSubstr("less than one window of 8"));
  EXPECT_EQ(LoadTextDataset(dir + "/absent", "train", 8).status().code(), absl::StatusCode::kNotFound);
  DatasetOptions opts;
  opts.sequence_length = 8;
  EXPECT_TRUE(IsTextDataset("fortunes"));
  EXPECT_TRUE(IsTextDataset("text:/x"));
  EXPECT_FALSE(IsTextDataset("npy:/x"));
  absl::StatusOr<Dataset> named = LoadNamedDataset(absl::StrCat("text:", dir, "/short.txt"), Split::kTrain, opts);
  EXPECT_THAT(std::string(named.status().message()), ::testing::HasSubstr("less than one window"));
}

}  // namespace
}  // namespace data
}  // namespace nereid
