#ifndef NEREID_RUNTIME_LAUNCHER_PROGRESS_REPORTER_H_
#define NEREID_RUNTIME_LAUNCHER_PROGRESS_REPORTER_H_

// The worker's side of the launcher's progress protocol.
//
// The launcher gives every worker a pipe and names its write end in the
// environment variable NEREID_PROGRESS_FD. A worker reports progress by
// writing one line per report, free-form but by convention `key=value` pairs
// ("phase=train epoch=1 step=34"). The launcher keeps each rank's last line
// and the time it arrived; a rank that reports nothing for the progress
// timeout is considered hung, and the line is quoted in the error.
//
// Report() never blocks the worker for long: the descriptor is made
// non-blocking and a line (at most PIPE_BUF bytes, so it is written whole or
// not at all) that does not fit in the pipe is dropped and counted. It is
// safe to call from any number of threads. A closed pipe (the launcher is
// gone) does not raise SIGPIPE in the worker; the line is dropped.
//
// The launcher may also set NEREID_WORKER_METRICS to a path where the worker
// writes its final metrics JSON; WriteMetrics() does that atomically
// (temporary file, then rename) and the launcher collects the file afterwards.
//
//   ProgressReporter progress = ProgressReporter::FromEnvironment();
//   progress.Report(absl::StrCat("phase=train epoch=", e, " step=", s));
//   RETURN_IF_ERROR(progress.WriteMetrics(json));
//
// Without NEREID_PROGRESS_FD (a worker run by hand) Report() does nothing.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace nereid {
namespace launcher {

inline constexpr char kProgressFdEnv[] = "NEREID_PROGRESS_FD";
inline constexpr char kWorkerMetricsEnv[] = "NEREID_WORKER_METRICS";

class ProgressReporter {
 public:
  // A reporter that reports nothing and has no metrics path.
  ProgressReporter() = default;

  // Reports to `fd`, which it takes over (made non-blocking and close-on-exec,
  // closed by the destructor); fd < 0 reports nothing.
  explicit ProgressReporter(int fd, std::string metrics_path = "");

  // Reads NEREID_PROGRESS_FD and NEREID_WORKER_METRICS. An unset or malformed
  // NEREID_PROGRESS_FD, or one naming a descriptor that is not an open pipe,
  // gives a reporter whose Report() does nothing.
  static ProgressReporter FromEnvironment();

  ProgressReporter(ProgressReporter&& other) noexcept;
  ProgressReporter& operator=(ProgressReporter&& other) noexcept;
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  ~ProgressReporter();

  bool enabled() const { return fd_ >= 0; }

  // Sends `what` as one line. Newlines and carriage returns in it become
  // spaces; it is cut to PIPE_BUF - 1 bytes. Returns whether the line was
  // written (false when disabled, or when the pipe was full or closed).
  bool Report(absl::string_view what);

  // Lines dropped because the pipe was full or closed.
  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // NEREID_WORKER_METRICS, or empty.
  const std::string& metrics_path() const { return metrics_path_; }

  // Writes `json` to metrics_path() via a temporary file and rename(); does
  // nothing when metrics_path() is empty.
  absl::Status WriteMetrics(absl::string_view json) const;

 private:
  int fd_ = -1;
  std::string metrics_path_;
  std::atomic<int64_t> dropped_{0};
};

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_PROGRESS_REPORTER_H_
