#include "core/terminal_width.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(TerminalWidthTest, ALineIsCutToLeaveTheLastColumnFree) {
  EXPECT_EQ(FitToColumns("0123456789", 8), "0123456");
  EXPECT_EQ(FitToColumns("0123456", 8), "0123456");
  EXPECT_EQ(FitToColumns("01234567", 8), "0123456");
  EXPECT_EQ(FitToColumns("0123456789", 0), "0123456789");  // unknown width: as it is
}

TEST(TerminalWidthTest, NotATerminalFallsBackToColumns) {
  const int fd = ::open("/dev/null", O_WRONLY);
  ASSERT_GE(fd, 0);
  ::setenv("COLUMNS", "72", 1);
  EXPECT_EQ(TerminalColumns(fd), 72);
  ::unsetenv("COLUMNS");
  EXPECT_EQ(TerminalColumns(fd), 0);
  ::close(fd);
}

}  // namespace
}  // namespace nereid
