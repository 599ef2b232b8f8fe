#include "runtime/launcher/interrupt_handler.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <memory>

#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

int g_custom_handler_calls = 0;
void CustomHandler(int) { ++g_custom_handler_calls; }

TEST(InterruptHandlerTest, SignalsBecomeBytesAndHandlersAreRestored) {
  struct sigaction custom = {};
  custom.sa_handler = CustomHandler;
  sigemptyset(&custom.sa_mask);
  struct sigaction saved_int, saved_term;
  ASSERT_EQ(sigaction(SIGINT, &custom, &saved_int), 0);
  ASSERT_EQ(sigaction(SIGTERM, &custom, &saved_term), 0);

  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  {
    absl::StatusOr<std::unique_ptr<InterruptHandler>> handler = InterruptHandler::Install(fds[1]);
    ASSERT_TRUE(handler.ok()) << handler.status();
    // Only one at a time.
    EXPECT_EQ(InterruptHandler::Install(fds[1]).status().code(), absl::StatusCode::kFailedPrecondition);

    raise(SIGINT);
    raise(SIGTERM);
    unsigned char bytes[4];
    ASSERT_EQ(read(fds[0], bytes, sizeof(bytes)), 2);
    EXPECT_EQ(bytes[0], SIGINT);
    EXPECT_EQ(bytes[1], SIGTERM);
    EXPECT_EQ(g_custom_handler_calls, 0);
  }
  // The previous handlers are back.
  raise(SIGINT);
  EXPECT_EQ(g_custom_handler_calls, 1);
  unsigned char byte;
  EXPECT_EQ(read(fds[0], &byte, 1), -1);
  // And a new handler may be installed again.
  EXPECT_TRUE(InterruptHandler::Install(fds[1]).ok());

  sigaction(SIGINT, &saved_int, nullptr);
  sigaction(SIGTERM, &saved_term, nullptr);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
