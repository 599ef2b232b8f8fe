#include "runtime/launcher/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/terminal_width.h"
#include "runtime/launcher/interrupt_handler.h"
#include "runtime/launcher/line_splitter.h"
#include "runtime/launcher/progress_reporter.h"
#include "runtime/launcher/wait_status.h"
#include "runtime/launcher/worker_process.h"

namespace nereid {
namespace launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Longest a poll() may sleep with nothing due: a safety net in case a wakeup
// is missed. Without pidfds, reaping relies on this tick.
constexpr auto kMaxSleep = std::chrono::milliseconds(1000);
constexpr auto kMaxSleepWithoutPidfd = std::chrono::milliseconds(50);
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxDrainReads = 64;  // 4 MiB, more than a pipe holds

std::string Workers(int n) { return absl::StrCat(n, n == 1 ? " worker" : " workers"); }

// t + d, saturating: durations of a century or more (absl::InfiniteDuration()
// included) never expire.
Clock::time_point After(Clock::time_point t, absl::Duration d) {
  if (d >= absl::Hours(24 * 365 * 100)) return Clock::time_point::max();
  return t + std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

enum class Stream { kStdout, kStderr, kProgress };

struct Rank {
  WorkerProcess proc;
  LineSplitter stdout_lines, stderr_lines, progress_lines;
  bool running = false;
  bool has_progress = false;
  Clock::time_point started;
  Clock::time_point last_progress_at;
  // Any progress line, start-up stages included: who spoke last, for blame.
  Clock::time_point last_line_at;
};

// The state of one Run(): the ranks, the poll loop and the stopping logic.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, int wake_fd, std::vector<WorkerResult>* results)
      : options_(options), wake_fd_(wake_fd), results_(*results), ranks_(results->size()) {}

  absl::Status Run() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (DrainWake()) {
        OnInterrupt();
        break;
      }
      if (!Spawn(static_cast<int>(r))) break;
    }
    while (AnyRunning()) Step();
    CollectMetrics();
    return status_;
  }

 private:
  bool AnyRunning() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
  }

  bool Spawn(int r) {
    const WorkerSpec& spec = options_.workers[static_cast<size_t>(r)];
    std::vector<std::pair<std::string, std::string>> env = spec.env;
    if (!results_[static_cast<size_t>(r)].metrics_path.empty()) {
      env.emplace_back(kWorkerMetricsEnv, results_[static_cast<size_t>(r)].metrics_path);
    }
    absl::StatusOr<WorkerProcess> proc = SpawnWorker(spec.argv, env);
    if (!proc.ok()) {
      StopAll(proc.status().code(), absl::StrCat("rank ", r, ": ", proc.status().message()), -1, true);
      return false;
    }
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.proc = std::move(*proc);
    rank.running = true;
    rank.started = Clock::now();
    results_[static_cast<size_t>(r)].pid = rank.proc.pid;
    return true;
  }

  // One turn of the loop: enforce deadlines, sleep in poll(), handle what woke it.
  void Step() {
    const Clock::time_point now = Clock::now();
    if (!stopping_) CheckProgress(now);
    if (stopping_ && !killed_ && now >= kill_at_) KillAll();

    struct Watched {
      int rank;
      Stream stream;
    };
    std::vector<pollfd> fds;
    std::vector<Watched> watched;
    fds.push_back({wake_fd_, POLLIN, 0});
    watched.push_back({-1, Stream::kStdout});
    bool without_pidfd = false;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rank = ranks_[r];
      const int ri = static_cast<int>(r);
      for (Stream s : {Stream::kStdout, Stream::kStderr, Stream::kProgress}) {
        if (Fd(rank, s).valid()) {
          fds.push_back({Fd(rank, s).get(), POLLIN, 0});
          watched.push_back({ri, s});
        }
      }
      if (!rank.running) continue;
      if (rank.proc.pidfd.valid()) {
        fds.push_back({rank.proc.pidfd.get(), POLLIN, 0});
        watched.push_back({-1, Stream::kStdout});
      } else {
        without_pidfd = true;
      }
    }

    const int rc = poll(fds.data(), fds.size(), TimeoutMs(now, without_pidfd));
    if (rc < 0 && errno != EINTR) usleep(10 * 1000);  // cannot happen with valid fds; do not spin
    if (DrainWake()) OnInterrupt();
    if (rc > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (watched[i].rank >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          ReadOnce(watched[i].rank, watched[i].stream);
        }
      }
    }
    ReapExited();
    FlushOutputs();
  }

  int TimeoutMs(Clock::time_point now, bool without_pidfd) const {
    Clock::time_point wake = now + (without_pidfd ? kMaxSleepWithoutPidfd : kMaxSleep);
    if (!stopping_) {
      for (const Rank& rank : ranks_) {
        if (rank.running) wake = std::min(wake, Deadline(rank));
      }
    } else if (!killed_) {
      wake = std::min(wake, kill_at_);
    }
    if (wake <= now) return 0;
    // Round up so the loop does not spin through the last millisecond.
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wake - now).count());
  }

  Clock::time_point Deadline(const Rank& rank) const {
    return rank.has_progress ? After(rank.last_progress_at, options_.progress_timeout)
                             : After(rank.started, options_.startup_timeout);
  }

  void CheckProgress(Clock::time_point now) {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Rank& rank = ranks_[r];
      if (!rank.running || now < Deadline(rank)) continue;
      const std::string message =
          rank.has_progress
              ? absl::StrCat("rank ", r, " made no progress for ", absl::FormatDuration(options_.progress_timeout),
                             " (last: ", results_[r].last_progress, ")")
              : absl::StrCat("rank ", r, " reported no progress within the startup timeout of ",
                             absl::FormatDuration(options_.startup_timeout));
      StopAll(absl::StatusCode::kDeadlineExceeded, message, static_cast<int>(r), false);
      return;
    }
  }

  // Reads the bytes Stop() and the signal handler left on the wake pipe;
  // true if there were any.
  bool DrainWake() {
    bool woke = false;
    unsigned char buf[64];
    ssize_t n;
    while ((n = read(wake_fd_, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) woke = true;
    }
    return woke;
  }

  void OnInterrupt() {
    if (!stopping_) {
      StopAll(absl::StatusCode::kCancelled, "interrupted", -1, false);
    } else if (!killed_) {
      KillAll();  // a second Ctrl-C: no more grace
    }
  }

  // Starts stopping every running worker and records why. `culprit` (a hung
  // rank, or -1) gets SIGKILL at once; the others SIGTERM and SIGCONT now and
  // SIGKILL after the grace period. Only the first reason counts.
  void StopAll(absl::StatusCode code, const std::string& message, int culprit, bool others) {
    if (stopping_) return;
    stopping_ = true;
    int stopped = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (!ranks_[r].running) continue;
      ++stopped;
      results_[r].stopped_by_launcher = true;
      const pid_t pid = ranks_[r].proc.pid;
      if (static_cast<int>(r) == culprit) {
        kill(pid, SIGKILL);
      } else {
        kill(pid, SIGTERM);
        kill(pid, SIGCONT);  // a stopped process only acts on SIGTERM once continued
      }
    }
    kill_at_ = After(Clock::now(), options_.grace);
    if (code == absl::StatusCode::kCancelled) {
      status_ = absl::CancelledError(absl::StrCat(message, ": stopped ", Workers(stopped)));
    } else if (stopped == 0) {
      status_ = absl::Status(code, message);
    } else {
      status_ = absl::Status(code, absl::StrCat(message, "; stopped ", stopped, others ? " other" : "",
                                                stopped == 1 ? " worker" : " workers"));
    }
  }

  void KillAll() {
    killed_ = true;
    for (const Rank& rank : ranks_) {
      if (rank.running) kill(rank.proc.pid, SIGKILL);
    }
  }

  static UniqueFd& Fd(Rank& rank, Stream s) {
    switch (s) {
      case Stream::kStdout:
        return rank.proc.stdout_fd;
      case Stream::kStderr:
        return rank.proc.stderr_fd;
      case Stream::kProgress:
        break;
    }
    return rank.proc.progress_fd;
  }

  static LineSplitter& Splitter(Rank& rank, Stream s) {
    switch (s) {
      case Stream::kStdout:
        return rank.stdout_lines;
      case Stream::kStderr:
        return rank.stderr_lines;
      case Stream::kProgress:
        break;
    }
    return rank.progress_lines;
  }

  // Reads one chunk; returns false once the stream is closed (EOF or error).
  bool ReadOnce(int r, Stream s) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    UniqueFd& fd = Fd(rank, s);
    if (!fd.valid()) return false;
    char buf[kReadChunk];
    ssize_t n;
    do {
      n = read(fd.get(), buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    std::vector<std::string> lines;
    if (n > 0) {
      std::vector<bool> returns;
      Splitter(rank, s).Append(absl::string_view(buf, static_cast<size_t>(n)), &lines, &returns);
      Emit(r, s, lines, returns);
      return true;
    }
    if (n < 0 && errno == EAGAIN) return false;
    // EOF or a read error: the rest of a partial line goes out now.
    Splitter(rank, s).Flush(&lines);
    Emit(r, s, lines);
    fd.reset();
    return false;
  }

  // `returns[i]`: line i was ended by '\r'. On a terminal such a line (a
  // progress bar redrawn in place) is redrawn in place here too, and the
  // next plain line goes below it.
  void Emit(int r, Stream s, const std::vector<std::string>& lines, const std::vector<bool>& returns = {}) {
    if (lines.empty()) return;
    if (s == Stream::kProgress) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      WorkerResult& result = results_[static_cast<size_t>(r)];
      for (const std::string& line : lines) {
        if (options_.startup_prefix.empty() || !absl::StartsWith(line, options_.startup_prefix)) {
          rank.has_progress = true;
          rank.last_progress_at = Clock::now();
        }
        result.last_progress = line;
        rank.last_line_at = Clock::now();
        ++result.progress_lines;
        if (options_.on_progress) options_.on_progress(r, line);
      }
      return;
    }
    FILE* f = s == Stream::kStdout ? options_.out : options_.err;
    if (f == nullptr) return;
    const std::string prefix = absl::StrCat("[rank ", r, "] ");
    const bool terminal = s == Stream::kStdout ? out_terminal_ : err_terminal_;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string text;
      if (terminal && i < returns.size() && returns[i]) {
        // Cut to the terminal's width: a wrapped line cannot be redrawn.
        text = absl::StrCat("\r", FitToColumns(absl::StrCat(prefix, lines[i]), TerminalColumns(fileno(f))), "\033[K");
        bar_showing_ = true;
      } else {
        if (terminal && bar_showing_) {
          // The bar stays, as its last draw: the line goes below it. The bar
          // may be on the other stream: it reaches the terminal first.
          FILE* other = s == Stream::kStdout ? options_.err : options_.out;
          if (other != nullptr) std::fflush(other);
          text = "\n";
          bar_showing_ = false;
        }
        absl::StrAppend(&text, prefix, lines[i], "\n");
      }
      std::fwrite(text.data(), 1, text.size(), f);
    }
    (s == Stream::kStdout ? out_dirty_ : err_dirty_) = true;
  }

  void FlushOutputs() {
    if (out_dirty_ && options_.out != nullptr) std::fflush(options_.out);
    if (err_dirty_ && options_.err != nullptr) std::fflush(options_.err);
    out_dirty_ = err_dirty_ = false;
  }

  // Ranks that ended since the last pass are handled signalled ones first:
  // when a killed rank's peers give up on its closed sockets, all of them
  // may be found ended at once, and the first failure handled is the one
  // reported.
  void ReapExited() {
    std::vector<std::pair<int, int>> ended;  // (rank, wait status)
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (!ranks_[r].running) continue;
      int status = 0;
      const pid_t rc = waitpid(ranks_[r].proc.pid, &status, WNOHANG);
      if (rc == ranks_[r].proc.pid) {
        ended.emplace_back(static_cast<int>(r), status);
      } else if (rc < 0 && errno == ECHILD) {
        OnLost(static_cast<int>(r));
      }
    }
    std::stable_partition(ended.begin(), ended.end(), [](const auto& e) { return WIFSIGNALED(e.second); });
    for (const auto& [r, status] : ended) OnExit(r, status);
  }

  // Everything the worker wrote before it ended is in its pipes: read it,
  // then close them. A grandchild that still holds a pipe and keeps writing
  // is cut off after a bounded number of reads.
  void DrainAndClose(int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    for (Stream s : {Stream::kStdout, Stream::kStderr, Stream::kProgress}) {
      for (int reads = 0; reads < kMaxDrainReads && ReadOnce(r, s); ++reads) {
      }
      if (Fd(rank, s).valid()) {
        std::vector<std::string> lines;
        Splitter(rank, s).Flush(&lines);
        Emit(r, s, lines);
        Fd(rank, s).reset();
      }
    }
    rank.proc.pidfd.reset();
    rank.running = false;
  }

  std::string Doing(int r) const {
    const WorkerResult& result = results_[static_cast<size_t>(r)];
    return result.progress_lines > 0 ? absl::StrCat(" while ", result.last_progress) : " before reporting progress";
  }

  void OnExit(int r, int status) {
    DrainAndClose(r);
    WorkerResult& result = results_[static_cast<size_t>(r)];
    result.reaped = true;
    result.wait_status = status;
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
    if (stopping_ || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) return;
    // A Ctrl-C at a terminal reaches the workers too; if one died of it
    // before the loop saw the launcher's own signal, report the interrupt.
    if (DrainWake()) {
      OnInterrupt();
      return;
    }
    const std::string exited = absl::StrCat("rank ", r, " ", DescribeWaitStatus(status), Doing(r));
    // Only a rank that gave up (an exit code) may blame a peer: one killed
    // by a signal while it waited died of its own (SIGKILL, a crash).
    if (std::optional<int> silent = WIFEXITED(status) ? SilentPeerOf(r) : std::nullopt) {
      const Rank& culprit = ranks_[static_cast<size_t>(*silent)];
      StopAll(absl::StatusCode::kDeadlineExceeded,
              absl::StrCat("rank ", *silent, " made no progress for ",
                           absl::FormatDuration(absl::Trunc(absl::FromChrono(Clock::now() - culprit.last_line_at),
                                                            absl::Seconds(1))),
                           " (last: ", results_[static_cast<size_t>(*silent)].last_progress, ") while ", exited),
              *silent, false);
      return;
    }
    StopAll(absl::StatusCode::kAborted, exited, -1, true);
  }

  // When rank `r` failed while waiting for its peers in a collective: the
  // running rank that has been silent longest and is not itself waiting (the
  // one `r` waited for), if any; a rank still in its start-up stages counts
  // (a peer may stop before its first step).
  std::optional<int> SilentPeerOf(int r) const {
    const std::string& marker = options_.waiting_marker;
    if (marker.empty() || results_[static_cast<size_t>(r)].last_progress.find(marker) == std::string::npos) {
      return std::nullopt;
    }
    std::optional<int> silent;
    for (size_t q = 0; q < ranks_.size(); ++q) {
      const Rank& rank = ranks_[q];
      if (!rank.running || results_[q].progress_lines == 0 ||
          results_[q].last_progress.find(marker) != std::string::npos) {
        continue;
      }
      if (!silent || rank.last_line_at < ranks_[static_cast<size_t>(*silent)].last_line_at) {
        silent = static_cast<int>(q);
      }
    }
    return silent;
  }

  // Someone else reaped the worker (e.g. SIGCHLD is ignored in this process).
  void OnLost(int r) {
    DrainAndClose(r);
    if (stopping_) return;
    StopAll(absl::StatusCode::kInternal,
            absl::StrCat("rank ", r, " ended but its exit status was lost (waitpid: ECHILD)", Doing(r)), -1, true);
  }

  void CollectMetrics() {
    for (WorkerResult& result : results_) {
      if (result.metrics_path.empty()) continue;
      FILE* f = std::fopen(result.metrics_path.c_str(), "rb");
      if (f == nullptr) continue;
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) result.metrics.append(buf, n);
      std::fclose(f);
    }
  }

  const LaunchOptions& options_;
  // Whether out and err are terminals, and a redrawn line is showing.
  const bool out_terminal_ = options_.out != nullptr && isatty(fileno(options_.out));
  const bool err_terminal_ = options_.err != nullptr && isatty(fileno(options_.err));
  bool bar_showing_ = false;
  const int wake_fd_;
  std::vector<WorkerResult>& results_;
  std::vector<Rank> ranks_;
  absl::Status status_;
  bool stopping_ = false;
  bool killed_ = false;  // SIGKILL sent to everyone still running
  Clock::time_point kill_at_;
  bool out_dirty_ = false, err_dirty_ = false;
};

absl::Status Validate(const LaunchOptions& options) {
  if (options.workers.empty()) return absl::InvalidArgumentError("no workers to launch");
  for (size_t r = 0; r < options.workers.size(); ++r) {
    if (options.workers[r].argv.empty()) return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": empty argv"));
  }
  if (options.progress_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("progress_timeout must be positive");
  }
  if (options.startup_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("startup_timeout must be positive");
  }
  if (options.grace < absl::ZeroDuration()) return absl::InvalidArgumentError("grace must not be negative");
  return absl::OkStatus();
}

}  // namespace

std::string WorkerResult::Describe() const {
  if (pid < 0) return "did not start";
  if (!reaped) return "was not reaped";
  return DescribeWaitStatus(wait_status);
}

Launcher::Launcher(LaunchOptions options) : options_(std::move(options)) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    init_status_ = absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
    return;
  }
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
}

Launcher::~Launcher() = default;

void Launcher::Stop() {
  if (!wake_write_.valid()) return;
  const unsigned char byte = 0;
  const ssize_t ignored = write(wake_write_.get(), &byte, 1);  // a full pipe already wakes the loop
  (void)ignored;
}

absl::Status Launcher::Run() {
  if (ran_) return absl::FailedPreconditionError("Launcher::Run() may be called only once");
  ran_ = true;
  if (!init_status_.ok()) return init_status_;
  if (absl::Status valid = Validate(options_); !valid.ok()) return valid;

  results_.assign(options_.workers.size(), WorkerResult());
  for (size_t r = 0; r < results_.size(); ++r) {
    results_[r].rank = static_cast<int>(r);
    if (!options_.metrics_dir.empty()) {
      results_[r].metrics_path = absl::StrCat(options_.metrics_dir, "/worker-", r, ".json");
      unlink(results_[r].metrics_path.c_str());  // a stale file from an earlier run must not count
    }
  }

  std::unique_ptr<InterruptHandler> interrupts;
  if (options_.handle_signals) {
    absl::StatusOr<std::unique_ptr<InterruptHandler>> installed = InterruptHandler::Install(wake_write_.get());
    if (!installed.ok()) return installed.status();
    interrupts = std::move(*installed);
  }
  Supervisor supervisor(options_, wake_read_.get(), &results_);
  return supervisor.Run();  // every worker is reaped before the handlers go back
}

absl::Status RunWorkers(LaunchOptions options, std::vector<WorkerResult>* results) {
  Launcher launcher(std::move(options));
  absl::Status status = launcher.Run();
  if (results != nullptr) *results = launcher.results();
  return status;
}

}  // namespace launcher
}  // namespace nereid
