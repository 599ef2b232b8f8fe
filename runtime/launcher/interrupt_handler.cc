#include "runtime/launcher/interrupt_handler.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace launcher {
namespace {

// The pipe the handler writes to; -1 while no InterruptHandler is installed.
std::atomic<int> g_wake_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const int fd = g_wake_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal_number);
    const ssize_t ignored = write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InterruptHandler>> InterruptHandler::Install(int wake_fd) {
  if (wake_fd < 0) return absl::InvalidArgumentError("InterruptHandler needs a pipe to write to");
  int expected = -1;
  if (!g_wake_fd.compare_exchange_strong(expected, wake_fd)) {
    return absl::FailedPreconditionError("another launcher is already handling SIGINT and SIGTERM");
  }
  std::unique_ptr<InterruptHandler> handler(new InterruptHandler());
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &action, &handler->previous_int_) != 0) {
    const int error = errno;
    g_wake_fd.store(-1);
    return absl::InternalError(absl::StrCat("sigaction(SIGINT): ", strerror(error)));
  }
  if (sigaction(SIGTERM, &action, &handler->previous_term_) != 0) {
    const int error = errno;
    sigaction(SIGINT, &handler->previous_int_, nullptr);
    g_wake_fd.store(-1);
    return absl::InternalError(absl::StrCat("sigaction(SIGTERM): ", strerror(error)));
  }
  return handler;
}

InterruptHandler::~InterruptHandler() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
  g_wake_fd.store(-1);
}

}  // namespace launcher
}  // namespace nereid
