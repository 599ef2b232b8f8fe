#include "runtime/launcher/wait_status.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

// The real status of a child that runs `body` and then _exit(0)s.
template <typename Body>
int StatusOfChild(Body body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

TEST(WaitStatusTest, SignalNames) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(1000), "SIG1000");
}

TEST(WaitStatusTest, Exit) {
  EXPECT_EQ(DescribeWaitStatus(StatusOfChild([] { _exit(3); })), "exited with code 3");
  EXPECT_EQ(DescribeWaitStatus(StatusOfChild([] {})), "exited with code 0");
}

TEST(WaitStatusTest, Signal) {
  EXPECT_EQ(DescribeWaitStatus(StatusOfChild([] { raise(SIGKILL); })), "was killed by signal 9 (SIGKILL)");
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
