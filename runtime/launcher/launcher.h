#ifndef NEREID_RUNTIME_LAUNCHER_LAUNCHER_H_
#define NEREID_RUNTIME_LAUNCHER_LAUNCHER_H_

// Launcher runs N worker processes on this machine and supervises them: the
// engine behind `nereid run PLAN --workers N`.
//
// Run() spawns one process per rank (see worker_process.h for what a worker
// inherits), then watches all of them from the calling thread with one poll()
// loop:
//   - each line a worker writes to stdout or stderr goes to `out` or `err`
//     prefixed "[rank R] " ('\r' ends a line too; see line_splitter.h; a
//     partial last line is written when the worker exits);
//   - each line it writes to its progress pipe (progress_reporter.h) becomes
//     that rank's "last progress", with the time it arrived;
//   - a worker that exits non-zero or is killed by a signal, or that reports
//     no progress for `progress_timeout` (before its first report past
//     start-up: `startup_timeout`), ends the run: the hung rank gets SIGKILL at once,
//     every other running worker gets SIGTERM (and SIGCONT, in case it is
//     stopped) and, after `grace`, SIGKILL. Run() returns only when every
//     worker has been reaped, so the run ends within the timeout plus `grace`
//     plus a poll tick after the last sign of life;
//   - SIGINT or SIGTERM to the launcher (with `handle_signals`), or Stop(),
//     stops every worker the same way and Run() returns Cancelled; a second
//     interrupt while stopping sends SIGKILL at once. The previous signal
//     handlers are back in place when Run() returns.
//
// Errors (the first failure wins; later deaths caused by stopping do not count):
//   Aborted          "rank 1 exited with code 3 while phase=train step=12; stopped 3 other workers"
//   Aborted          "rank 1 was killed by signal 9 (SIGKILL) before reporting progress"
//   DeadlineExceeded "rank 1 made no progress for 5s (last: phase=train epoch=0 step=12); stopped 4 workers"
//   DeadlineExceeded "rank 1 reported no progress within the startup timeout of 1m; stopped 4 workers"
//   Cancelled        "interrupted: stopped 4 workers"
//   NotFound, ...    "rank 2: cannot run '/bin/nope': No such file or directory"
//
//   LaunchOptions options;
//   for (int r = 0; r < n; ++r) options.workers.push_back({argv, {{"NEREID_RANK", StrCat(r)}}});
//   Launcher launcher(std::move(options));
//   absl::Status status = launcher.Run();
//   for (const WorkerResult& w : launcher.results()) ...

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/launcher/unique_fd.h"

namespace nereid {
namespace launcher {

struct WorkerSpec {
  // argv[0] is a path, or a name looked up on PATH.
  std::vector<std::string> argv;
  // Set in the worker's environment on top of the launcher's.
  std::vector<std::pair<std::string, std::string>> env;
};

struct LaunchOptions {
  std::vector<WorkerSpec> workers;  // one per rank, rank = index

  // Longest silence on a rank's progress pipe once it has reported once.
  absl::Duration progress_timeout = absl::Minutes(5);
  // Longest wait for a rank's first progress line. Lines that start with
  // `startup_prefix` (a worker's start-up stages: rendezvous, data loading,
  // parameter set-up) are shown as its last progress but keep it within this
  // window: a short progress_timeout must not kill a worker still loading.
  absl::Duration startup_timeout = absl::Minutes(10);
  std::string startup_prefix = "phase=startup";
  // Progress lines containing this say the worker waits for its peers inside
  // a collective. When such a worker fails (its collective timed out), the
  // rank to blame is the silent one it waited for, if one is: the error names
  // that rank first, whichever timeout fired first.
  std::string waiting_marker = "waiting_for_peers";
  // Time between SIGTERM and SIGKILL when stopping workers.
  absl::Duration grace = absl::Seconds(2);

  // Where workers' prefixed stdout and stderr lines go; nullptr drops them.
  FILE* out = stdout;
  FILE* err = stderr;

  // When set, rank R gets NEREID_WORKER_METRICS=<metrics_dir>/worker-R.json
  // (a stale file of that name is removed first) and the file's contents end
  // up in WorkerResult::metrics.
  std::string metrics_dir;

  // Catch SIGINT and SIGTERM while Run() runs (only one launcher per process
  // can). Stop() works either way.
  bool handle_signals = true;

  // Called on Run()'s thread for every progress line.
  std::function<void(int rank, absl::string_view line)> on_progress;
};

struct WorkerResult {
  int rank = 0;
  pid_t pid = -1;                    // -1: never started
  bool reaped = false;               // it ended and was waited for
  int wait_status = 0;               // from waitpid(), when reaped
  int exit_code = -1;                // when it exited normally
  int term_signal = 0;               // when a signal killed it
  bool stopped_by_launcher = false;  // the launcher sent it SIGTERM or SIGKILL
  std::string last_progress;         // the last progress line; empty if none
  int64_t progress_lines = 0;
  std::string metrics_path;  // NEREID_WORKER_METRICS it was given; empty if none
  std::string metrics;       // that file's contents after the run; empty if absent

  // "exited with code 0", "was killed by signal 15 (SIGTERM)", "did not start".
  std::string Describe() const;
};

class Launcher {
 public:
  explicit Launcher(LaunchOptions options);
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;
  ~Launcher();

  // Runs the workers to the end, as described above. Call once.
  absl::Status Run();

  // Asks Run() to stop every worker and return Cancelled. Callable from any
  // thread and from a signal handler, before or during Run().
  void Stop();

  // One entry per rank, filled in by Run().
  const std::vector<WorkerResult>& results() const { return results_; }

 private:
  LaunchOptions options_;
  std::vector<WorkerResult> results_;
  UniqueFd wake_read_, wake_write_;  // Stop() and the signal handler write a byte here
  absl::Status init_status_;
  bool ran_ = false;
};

// Launcher(options).Run(), with the results copied to *results if non-null.
absl::Status RunWorkers(LaunchOptions options, std::vector<WorkerResult>* results = nullptr);

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_LAUNCHER_H_
