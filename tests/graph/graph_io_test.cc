// Reading and writing graph files: text and binary, exact round trips, parse
// errors with line and column, versions, and refusing oversized files.

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "core/file_io.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/import_export.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace nereid {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace ::nereid::testing;  // NOLINT

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const char* const kModels[] = {"models/mlp_fashion.pbtxt",   "models/lenet_fashion.pbtxt", "models/vgg11_cifar.pbtxt",
                               "models/vgg11_bn_cifar.pbtxt", "models/vgg16_cifar.pbtxt",   "models/resnet20_cifar.pbtxt",
                               "models/logreg_fashion.pbtxt", "models/svm_fashion.pbtxt"};

TEST(GraphIoTest, TextModelRoundTripsExactlyThroughTheIr) {
  for (const char* path : kModels) {
    auto file = ReadGraphFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto graph = ImportGraph(*file);
    ASSERT_TRUE(graph.ok()) << graph.status();
    GraphDef exported = ExportGraph(**graph);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(file->def, exported)) << path;
  }
}

TEST(GraphIoTest, BinaryAndTextFilesLoadTheSameGraph) {
  for (const char* path : kModels) {
    auto text = ReadGraphFile(path);
    ASSERT_TRUE(text.ok()) << text.status();
    std::string bin = TempPath("model.pb");
    ASSERT_TRUE(WriteGraphFile(text->def, bin, GraphFormat::kBinary).ok());
    auto binary = ReadGraphFile(bin);
    ASSERT_TRUE(binary.ok()) << binary.status();
    EXPECT_EQ(binary->format, GraphFormat::kBinary);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(text->def, binary->def)) << path;
    // Text written back out is byte-identical on a second trip.
    std::string t1 = TempPath("a.pbtxt"), t2 = TempPath("b.pbtxt");
    ASSERT_TRUE(WriteGraphFile(binary->def, t1, GraphFormat::kText).ok());
    auto again = ReadGraphFile(t1);
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(WriteGraphFile(again->def, t2, GraphFormat::kText).ok());
    EXPECT_EQ(ReadAll(t1), ReadAll(t2));
  }
}

TEST(GraphIoTest, ExportCanonicalisesPortZero) {
  auto graph = LoadText(InputNode("x", {2}) + OpNode("y", "Relu", {"x:0"}) + OpNode("z", "Relu", {"y", "^x"}));
  ASSERT_TRUE(graph.ok()) << graph.status();
  GraphDef def = ExportGraph(**graph);
  EXPECT_EQ(def.node(1).input(0), "x");
  EXPECT_EQ(def.node(2).input(1), "^x");
}

TEST(GraphIoTest, FormatIsGuessedFromExtensionThenContent) {
  EXPECT_EQ(GuessGraphFormat("m.pb", "node {}"), GraphFormat::kBinary);
  EXPECT_EQ(GuessGraphFormat("m.pbtxt", std::string("\0\1", 2)), GraphFormat::kText);
  EXPECT_EQ(GuessGraphFormat("m", "node { name: \"x\" }"), GraphFormat::kText);
  EXPECT_EQ(GuessGraphFormat("m", std::string("\x12\x03\x0a\x01x", 6)), GraphFormat::kBinary);
  EXPECT_EQ(GuessGraphFormat("m", "\xff\xfe"), GraphFormat::kBinary);
}

TEST(GraphIoTest, TextParseErrorHasLineAndColumn) {
  auto file = ParseGraphText("version: 1\nnode {\n  name: \"x\"\n  opp: \"Relu\"\n}\n", "bad.pbtxt");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              AllOf(HasSubstr("bad.pbtxt:4:"), HasSubstr("parse error"), HasSubstr("opp")));
}

TEST(GraphIoTest, UnterminatedMessageIsAParseError) {
  auto file = ParseGraphText("node {\n  name: \"x\"\n", "bad.pbtxt");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("bad.pbtxt:3:"));
}

TEST(GraphIoTest, NodeLocationsAreRecorded) {
  auto file = ParseGraphText("version: 1\n\nnode { name: \"a\" op: \"Relu\" }\n  node {\n name: \"b\" }\n", "f");
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(file->node_locations.size(), 2u);
  EXPECT_EQ(file->node_locations[0].line, 3);
  EXPECT_EQ(file->node_locations[0].column, 1);
  EXPECT_EQ(file->node_locations[1].line, 4);
  EXPECT_EQ(file->node_locations[1].column, 3);
}

TEST(GraphIoTest, NewerVersionIsRefused) {
  auto file = ParseGraphText("version: 7\n", "new.pbtxt");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("new.pbtxt: graph format version 7 is not supported"));
}

TEST(GraphIoTest, GarbageBinaryIsRefused) {
  std::string path = TempPath("garbage.pb");
  std::ofstream(path, std::ios::binary) << std::string("\xff\xff\xff\xff\xff\xff\xff", 7);
  auto file = ReadGraphFile(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("not a valid binary GraphDef"));
}

TEST(GraphIoTest, MissingFileIsNamed) {
  auto file = ReadGraphFile("/nonexistent/model.pbtxt");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("/nonexistent/model.pbtxt"));
}

TEST(GraphIoTest, DirectoryIsRefused) {
  auto file = ReadGraphFile(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("not a regular file"));
}

TEST(GraphIoTest, OversizedFileIsRefusedBeforeReading) {
  // A sparse 2 GiB file: no disk is used, and the reader must not read it.
  std::string path = TempPath("huge.pbtxt");
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, int64_t{2} << 30), 0);
  close(fd);
  auto file = ReadGraphFile(path);
  unlink(path.c_str());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("refusing files over"));
}

TEST(GraphIoTest, AtomicWriteLeavesNoTemporaryBehind) {
  std::string path = TempPath("atomic.txt");
  ASSERT_TRUE(WriteFileAtomically(path, "hello").ok());
  EXPECT_EQ(ReadAll(path), "hello");
  EXPECT_FALSE(WriteFileAtomically("/nonexistent-dir/x", "y").ok());
}

}  // namespace
}  // namespace nereid
