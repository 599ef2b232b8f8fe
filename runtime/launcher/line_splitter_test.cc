#include "runtime/launcher/line_splitter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

using Lines = std::vector<std::string>;

Lines SplitAll(const std::vector<std::string>& chunks, size_t max_line = 1024) {
  LineSplitter s(max_line);
  Lines lines;
  for (const std::string& c : chunks) s.Append(c, &lines);
  s.Flush(&lines);
  return lines;
}

TEST(LineSplitterTest, NewlinesEndLines) { EXPECT_EQ(SplitAll({"a\nbc\n"}), (Lines{"a", "bc"})); }

TEST(LineSplitterTest, KeepsEmptyLinesEndedByNewline) { EXPECT_EQ(SplitAll({"a\n\nb\n"}), (Lines{"a", "", "b"})); }

TEST(LineSplitterTest, LinesMaySpanChunks) {
  EXPECT_EQ(SplitAll({"he", "llo\nwor", "ld\n"}), (Lines{"hello", "world"}));
}

TEST(LineSplitterTest, FlushReturnsThePartialLastLine) {
  LineSplitter s;
  Lines lines;
  s.Append("done\npart", &lines);
  EXPECT_EQ(lines, (Lines{"done"}));
  s.Flush(&lines);
  EXPECT_EQ(lines, (Lines{"done", "part"}));
  s.Flush(&lines);  // nothing left
  EXPECT_EQ(lines.size(), 2u);
}

TEST(LineSplitterTest, CarriageReturnProgressBarBecomesOneLinePerUpdate) {
  EXPECT_EQ(SplitAll({"\rstep 1\rstep 2", "\rstep 3\n"}), (Lines{"step 1", "step 2", "step 3"}));
}

TEST(LineSplitterTest, CrLfIsOneLineEnd) { EXPECT_EQ(SplitAll({"a\r\nb\r", "\nc"}), (Lines{"a", "b", "c"})); }

TEST(LineSplitterTest, EmptyLinesEndedByCarriageReturnAreDropped) {
  EXPECT_EQ(SplitAll({"a\r\r\rb\n"}), (Lines{"a", "b"}));
}

TEST(LineSplitterTest, LongLinesAreCutIntoPieces) {
  EXPECT_EQ(SplitAll({"abcdefg\n"}, 3), (Lines{"abc", "def", "g"}));
  EXPECT_EQ(SplitAll({"abcdef\nx\n"}, 3), (Lines{"abc", "def", "x"}));
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
