#include "runtime/launcher/progress_reporter.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace nereid {
namespace launcher {
namespace {

absl::Status ErrnoStatus(int error, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(what, ": ", strerror(error)));
}

// Non-blocking (a full pipe drops the line instead of stalling the worker)
// and close-on-exec (programs the worker runs do not inherit the channel).
void PrepareFd(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const int fd_flags = fcntl(fd, F_GETFD);
  if (fd_flags >= 0) fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC);
}

}  // namespace

ProgressReporter::ProgressReporter(int fd, std::string metrics_path)
    : fd_(fd < 0 ? -1 : fd), metrics_path_(std::move(metrics_path)) {
  if (fd_ >= 0) PrepareFd(fd_);
}

ProgressReporter ProgressReporter::FromEnvironment() {
  const char* metrics = getenv(kWorkerMetricsEnv);
  std::string metrics_path = metrics != nullptr ? metrics : "";
  const char* fd_text = getenv(kProgressFdEnv);
  int fd = -1;
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &fd) || fd < 0) {
    return ProgressReporter(-1, std::move(metrics_path));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return ProgressReporter(-1, std::move(metrics_path));
  return ProgressReporter(fd, std::move(metrics_path));
}

ProgressReporter::ProgressReporter(ProgressReporter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      metrics_path_(std::move(other.metrics_path_)),
      dropped_(other.dropped_.load(std::memory_order_relaxed)) {}

ProgressReporter& ProgressReporter::operator=(ProgressReporter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    metrics_path_ = std::move(other.metrics_path_);
    dropped_.store(other.dropped_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  return *this;
}

ProgressReporter::~ProgressReporter() {
  if (fd_ >= 0) close(fd_);
}

bool ProgressReporter::Report(absl::string_view what) {
  if (fd_ < 0) return false;
  char line[PIPE_BUF];
  const size_t n = std::min(what.size(), sizeof(line) - 1);
  for (size_t i = 0; i < n; ++i) line[i] = (what[i] == '\n' || what[i] == '\r') ? ' ' : what[i];
  line[n] = '\n';

  // A write to a pipe whose reader is gone raises SIGPIPE in the writing
  // thread. Block it here, and if the write failed with EPIPE consume the
  // signal it left pending (unless one was pending already), so the worker
  // only sees a dropped line.
  sigset_t pipe_only, old_mask, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigemptyset(&pending);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  ssize_t written;
  do {
    written = write(fd_, line, n + 1);
  } while (written < 0 && errno == EINTR);
  if (written < 0 && errno == EPIPE && !was_pending) {
    const struct timespec no_wait = {0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);

  // Writes of at most PIPE_BUF bytes to a pipe are all or nothing.
  if (written == static_cast<ssize_t>(n + 1)) return true;
  dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

absl::Status ProgressReporter::WriteMetrics(absl::string_view json) const {
  if (metrics_path_.empty()) return absl::OkStatus();
  const std::string tmp = absl::StrCat(metrics_path_, ".tmp.", getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoStatus(errno, tmp);
  const bool wrote = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !wrote) {
    const int error = wrote ? errno : write_errno;
    unlink(tmp.c_str());
    return ErrnoStatus(error, tmp);
  }
  if (rename(tmp.c_str(), metrics_path_.c_str()) != 0) {
    const int error = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(error, metrics_path_);
  }
  return absl::OkStatus();
}

}  // namespace launcher
}  // namespace nereid
