#include "runtime/launcher/launcher.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

using ::std::chrono::steady_clock;

// Generous bound on any run below, so a regression fails instead of hanging.
// It is not a performance assertion: the workers that must be stopped sleep
// for 60 s, so a launcher that failed to stop them would take 60 s.
constexpr auto kHangGuard = std::chrono::seconds(20);

std::string TestTmpDir() {
  const char* dir = getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

WorkerSpec Sh(const std::string& script) { return WorkerSpec{{"/bin/sh", "-c", script}, {}}; }

// Every worker the launcher started has been reaped and is gone, and this
// process has no child left at all (no zombies).
void ExpectNoChildren(const std::vector<WorkerResult>& results) {
  for (const WorkerResult& w : results) {
    if (w.pid <= 0) continue;
    EXPECT_TRUE(w.reaped) << "rank " << w.rank;
    errno = 0;
    EXPECT_EQ(kill(w.pid, 0), -1) << "rank " << w.rank << " pid " << w.pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
  }
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = TestTmpDir() + "/launcher_output_XXXXXX";
    const int fd = mkstemp(path.data());
    ASSERT_GE(fd, 0);
    unlink(path.c_str());
    output_ = fdopen(fd, "w+");
    ASSERT_NE(output_, nullptr);
  }
  void TearDown() override {
    if (output_ != nullptr) std::fclose(output_);
  }

  LaunchOptions Options(const std::vector<std::string>& scripts) {
    LaunchOptions options;
    for (const std::string& s : scripts) options.workers.push_back(Sh(s));
    options.out = output_;
    options.err = output_;
    options.progress_timeout = absl::Seconds(1);
    options.startup_timeout = absl::Seconds(30);
    options.grace = absl::Seconds(1);
    return options;
  }

  // Runs to the end, checking the hang guard and that no child is left.
  absl::Status Run(LaunchOptions options) {
    const steady_clock::time_point start = steady_clock::now();
    absl::Status status = RunWorkers(std::move(options), &results_);
    EXPECT_LT(steady_clock::now() - start, kHangGuard);
    ExpectNoChildren(results_);
    return status;
  }

  std::string Output() {
    std::fflush(output_);
    std::rewind(output_);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), output_)) > 0) out.append(buf, n);
    return out;
  }

  FILE* output_ = nullptr;
  std::vector<WorkerResult> results_;
};

TEST_F(LauncherTest, AllSucceedAndOutputIsPrefixed) {
  LaunchOptions options = Options({});
  for (int r = 0; r < 3; ++r) {
    WorkerSpec spec = Sh("echo \"hello from $RANK\"; echo oops >&2; printf 'bar 1\\rbar 2\\n'; printf 'partial'");
    spec.env.emplace_back("RANK", absl::StrCat(r));
    options.workers.push_back(spec);
  }
  ASSERT_TRUE(Run(std::move(options)).ok());
  const std::string out = Output();
  for (int r = 0; r < 3; ++r) {
    const std::string prefix = absl::StrCat("[rank ", r, "] ");
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat(prefix, "hello from ", r, "\n"))) << out;
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat(prefix, "oops\n"))) << out;
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat(prefix, "bar 1\n", prefix, "bar 2\n"))) << out;
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat(prefix, "partial\n"))) << out;
  }
  ASSERT_EQ(results_.size(), 3u);
  for (const WorkerResult& w : results_) {
    EXPECT_EQ(w.exit_code, 0);
    EXPECT_EQ(w.term_signal, 0);
    EXPECT_FALSE(w.stopped_by_launcher);
    EXPECT_EQ(w.Describe(), "exited with code 0");
  }
}

TEST_F(LauncherTest, ProgressLinesAndMetricsAreCollected) {
  LaunchOptions options = Options({
      "echo \"fd=$NEREID_PROGRESS_FD\"; echo 'phase=train step=1' >&$NEREID_PROGRESS_FD; "
      "echo 'phase=done step=2' >&$NEREID_PROGRESS_FD; printf '{\"rank\": 0}' > \"$NEREID_WORKER_METRICS\"",
      "printf 'no newline at exit' >&$NEREID_PROGRESS_FD",
  });
  options.metrics_dir = TestTmpDir();
  std::vector<std::string> seen;
  options.on_progress = [&seen](int rank, absl::string_view line) { seen.push_back(absl::StrCat(rank, ":", line)); };
  ASSERT_TRUE(Run(std::move(options)).ok());
  EXPECT_TRUE(absl::StrContains(Output(), "[rank 0] fd=3\n"));
  EXPECT_EQ(results_[0].last_progress, "phase=done step=2");
  EXPECT_EQ(results_[0].progress_lines, 2);
  EXPECT_EQ(results_[0].metrics_path, TestTmpDir() + "/worker-0.json");
  EXPECT_EQ(results_[0].metrics, "{\"rank\": 0}");
  EXPECT_EQ(results_[1].last_progress, "no newline at exit");
  EXPECT_EQ(results_[1].metrics, "");  // wrote none
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"0:phase=done step=2", "0:phase=train step=1", "1:no newline at exit"}));
}

TEST_F(LauncherTest, NonZeroExitStopsTheOthers) {
  absl::Status status = Run(Options({
      "exec sleep 60",
      "echo 'phase=train epoch=0 step=7' >&$NEREID_PROGRESS_FD; exit 3",
      "exec sleep 60",
  }));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_EQ(status.message(), "rank 1 exited with code 3 while phase=train epoch=0 step=7; stopped 2 other workers");
  EXPECT_EQ(results_[1].exit_code, 3);
  EXPECT_FALSE(results_[1].stopped_by_launcher);
  for (int r : {0, 2}) {
    EXPECT_TRUE(results_[static_cast<size_t>(r)].stopped_by_launcher);
    EXPECT_EQ(results_[static_cast<size_t>(r)].term_signal, SIGTERM);
  }
}

TEST_F(LauncherTest, KilledBySignalIsNamed) {
  absl::Status status = Run(Options({"exec sleep 60", "kill -9 $$"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_EQ(status.message(),
            "rank 1 was killed by signal 9 (SIGKILL) before reporting progress; stopped 1 other worker");
  EXPECT_EQ(results_[1].term_signal, SIGKILL);
}

// Rank 1 is killed; rank 0 sees it die and gives up (exit 3), as a peer
// whose sockets closed does. The launcher is held in its progress callback
// until both have ended, so one pass finds both: the killed rank is named.
TEST_F(LauncherTest, AKilledRankIsNamedBeforeThePeerThatGaveUpOnIt) {
  const std::string dir = TestTmpDir() + "/killed_first";
  ASSERT_EQ(system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str()), 0);
  LaunchOptions options = Options({
      absl::StrCat("for i in $(seq 500); do [ -s ", dir, "/pid ] && break; sleep 0.01; done; ",
                   "pid=$(cat ", dir, "/pid); ",
                   "for i in $(seq 500); do [ \"$(cut -d' ' -f3 /proc/$pid/stat)\" = Z ] && break; sleep 0.01; done; ",
                   "touch ", dir, "/gave_up; exit 3"),
      absl::StrCat("echo $$ > ", dir, "/pid.tmp && mv ", dir, "/pid.tmp ", dir, "/pid; ",
                   "echo 'phase=train epoch=2 step=37' >&$NEREID_PROGRESS_FD; kill -9 $$"),
  });
  options.on_progress = [&dir](int, absl::string_view) {
    for (int i = 0; i < 500 && access((dir + "/gave_up").c_str(), F_OK) != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
    absl::SleepFor(absl::Milliseconds(100));  // rank 0's exit after its touch
  };
  absl::Status status = Run(std::move(options));
  EXPECT_TRUE(absl::StartsWith(status.message(), "rank 1 was killed by signal 9 (SIGKILL) while phase=train epoch=2 step=37"))
      << status;
  EXPECT_EQ(results_[0].exit_code, 3);
}

TEST_F(LauncherTest, StoppedWorkerIsCaughtByTheProgressTimeout) {
  absl::Status status = Run(Options({
      "exec sleep 60",
      "echo 'phase=train epoch=0 step=12' >&$NEREID_PROGRESS_FD; kill -STOP $$; echo resumed",
  }));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(status.message(), "rank 1 made no progress for 1s (last: phase=train epoch=0 step=12); stopped 2 workers");
  EXPECT_EQ(results_[1].term_signal, SIGKILL);  // SIGTERM would not reach a stopped process
  EXPECT_EQ(results_[0].term_signal, SIGTERM);
  EXPECT_FALSE(absl::StrContains(Output(), "resumed"));
}

TEST_F(LauncherTest, HungWorkerErrorQuotesItsLastProgressLine) {
  absl::Status status = Run(Options({
      "for i in 1 2 3; do echo \"phase=train epoch=0 step=$i\" >&$NEREID_PROGRESS_FD; sleep 0.1; done; "
      "exec sleep 60",
  }));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(status.message(), "rank 0 made no progress for 1s (last: phase=train epoch=0 step=3); stopped 1 worker");
  EXPECT_EQ(results_[0].progress_lines, 3);
}

TEST_F(LauncherTest, StartupTimeoutAppliesBeforeTheFirstReport) {
  LaunchOptions options = Options({"exec sleep 60", "echo 'phase=init' >&$NEREID_PROGRESS_FD; exec sleep 60"});
  options.progress_timeout = absl::Seconds(30);
  options.startup_timeout = absl::Seconds(1);
  absl::Status status = Run(std::move(options));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(status.message(), "rank 0 reported no progress within the startup timeout of 1s; stopped 2 workers");
}

// Start-up stages (data loading after the rendezvous) stay in the start-up
// window: a short progress timeout does not kill a worker still loading, and
// the start-up timeout still bounds them.
TEST_F(LauncherTest, StartupStagesDoNotEndTheStartupWindow) {
  LaunchOptions options = Options({"echo 'phase=startup stage=load_data' >&$NEREID_PROGRESS_FD; sleep 2; "
                                   "echo 'phase=train step=0' >&$NEREID_PROGRESS_FD"});
  options.progress_timeout = absl::Seconds(1);
  options.startup_timeout = absl::Seconds(30);
  EXPECT_TRUE(Run(std::move(options)).ok());

  LaunchOptions stuck = Options({"echo 'phase=startup stage=load_data' >&$NEREID_PROGRESS_FD; exec sleep 60"});
  stuck.progress_timeout = absl::Seconds(30);
  stuck.startup_timeout = absl::Seconds(1);
  absl::Status status = Run(std::move(stuck));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(status.message(), "rank 0 reported no progress within the startup timeout of 1s; stopped 1 worker");
}

// Rank 1 stops after step 19; rank 0 waits for it in an allreduce, reporting
// that it waits, until its collective times out and it exits 1. The rank to
// blame is rank 1, although rank 0's timeout fired first.
TEST_F(LauncherTest, AWorkerThatFailedWaitingForPeersBlamesTheSilentOne) {
  LaunchOptions options = Options(
      {"for i in 1 2 3 4; do echo 'phase=allreduce step=20 bucket=0 waiting_for_peers' >&$NEREID_PROGRESS_FD; "
       "sleep 0.5; done; exit 1",
       "echo 'phase=train epoch=0 step=19' >&$NEREID_PROGRESS_FD; exec sleep 60"});
  options.progress_timeout = absl::Seconds(30);
  absl::Status status = Run(std::move(options));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StartsWith(status.message(), "rank 1 made no progress for ")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(),
                                "(last: phase=train epoch=0 step=19) while rank 0 exited with code 1 while "
                                "phase=allreduce step=20 bucket=0 waiting_for_peers; stopped 1 worker"))
      << status;
}

// The silent peer may still be in its start-up stages (it stopped before its
// first step): it is still the one blamed.
TEST_F(LauncherTest, APeerSilentInItsStartupIsBlamed) {
  LaunchOptions options = Options(
      {"echo 'phase=startup stage=check_state' >&$NEREID_PROGRESS_FD; sleep 0.2; "
       "for i in 1 2 3; do echo 'phase=check_identical_state waiting_for_peers' >&$NEREID_PROGRESS_FD; "
       "sleep 0.5; done; exit 1",
       "echo 'phase=startup stage=check_state' >&$NEREID_PROGRESS_FD; exec sleep 60"});
  options.progress_timeout = absl::Seconds(30);
  absl::Status status = Run(std::move(options));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StartsWith(status.message(), "rank 1 made no progress for ")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "(last: phase=startup stage=check_state) while rank 0 exited"))
      << status;
}

// Killed by a signal while it waited (a SIGKILL, a crash), the rank is the
// one to blame, not the peer that happens to be silent.
TEST_F(LauncherTest, AWorkerKilledWhileWaitingForPeersIsTheOneBlamed) {
  LaunchOptions options = Options(
      {"echo 'phase=point_to_point transfers=9 waiting_for_peers' >&$NEREID_PROGRESS_FD; sleep 0.5; kill -9 $$",
       "echo 'phase=train epoch=0 step=19' >&$NEREID_PROGRESS_FD; exec sleep 60"});
  options.progress_timeout = absl::Seconds(30);
  absl::Status status = Run(std::move(options));
  EXPECT_TRUE(absl::StartsWith(status.message(), "rank 0 was killed by signal 9")) << status;
  EXPECT_FALSE(absl::StrContains(status.message(), "made no progress")) << status;
}

TEST_F(LauncherTest, WorkerIgnoringSigtermIsKilledAfterTheGrace) {
  LaunchOptions options = Options({"trap '' TERM; echo ready >&$NEREID_PROGRESS_FD; exec sleep 60"});
  options.grace = absl::Milliseconds(200);
  Launcher* launcher_ptr = nullptr;
  options.on_progress = [&launcher_ptr](int, absl::string_view) { launcher_ptr->Stop(); };
  Launcher launcher(std::move(options));
  launcher_ptr = &launcher;
  const absl::Status status = launcher.Run();
  ExpectNoChildren(launcher.results());
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(launcher.results()[0].term_signal, SIGKILL);
}

// Runs a launcher on its own thread until every worker has reported
// "ready", then calls `interrupt`; returns Run()'s status.
absl::Status RunAndInterrupt(LaunchOptions options, const std::function<void(Launcher&)>& interrupt,
                             std::vector<WorkerResult>* results) {
  std::atomic<int> ready{0};
  options.on_progress = [&ready](int, absl::string_view line) {
    if (line == "ready") ready.fetch_add(1);
  };
  const int workers = static_cast<int>(options.workers.size());
  Launcher launcher(std::move(options));
  absl::Status status;
  std::thread runner([&] { status = launcher.Run(); });
  const steady_clock::time_point start = steady_clock::now();
  while (ready.load() < workers && steady_clock::now() - start < kHangGuard) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ready.load(), workers);
  interrupt(launcher);
  runner.join();
  EXPECT_LT(steady_clock::now() - start, kHangGuard);
  *results = launcher.results();
  return status;
}

TEST_F(LauncherTest, StopFromAnotherThreadCancels) {
  const std::string script = "echo ready >&$NEREID_PROGRESS_FD; exec sleep 60";
  absl::Status status = RunAndInterrupt(
      Options({script, script}), [](Launcher& l) { l.Stop(); }, &results_);
  EXPECT_EQ(status, absl::CancelledError("interrupted: stopped 2 workers"));
  ExpectNoChildren(results_);
  for (const WorkerResult& w : results_) EXPECT_EQ(w.term_signal, SIGTERM);
}

void ExpectSignalCancels(int signal_number, LauncherTest& test, LaunchOptions options,
                         std::vector<WorkerResult>* results) {
  struct sigaction before;
  ASSERT_EQ(sigaction(signal_number, nullptr, &before), 0);
  absl::Status status = RunAndInterrupt(
      std::move(options), [signal_number](Launcher&) { kill(getpid(), signal_number); }, results);
  EXPECT_EQ(status, absl::CancelledError("interrupted: stopped 3 workers"));
  ExpectNoChildren(*results);
  // The launcher put the previous handler back.
  struct sigaction after;
  ASSERT_EQ(sigaction(signal_number, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST_F(LauncherTest, SigintIsForwardedToTheWorkers) {
  const std::string script = "echo ready >&$NEREID_PROGRESS_FD; exec sleep 60";
  ExpectSignalCancels(SIGINT, *this, Options({script, script, script}), &results_);
}

TEST_F(LauncherTest, SigtermIsForwardedToTheWorkers) {
  const std::string script = "echo ready >&$NEREID_PROGRESS_FD; exec sleep 60";
  ExpectSignalCancels(SIGTERM, *this, Options({script, script, script}), &results_);
}

TEST_F(LauncherTest, StopBeforeRunStartsNothing) {
  Launcher launcher(Options({"exec sleep 60"}));
  launcher.Stop();
  EXPECT_EQ(launcher.Run(), absl::CancelledError("interrupted: stopped 0 workers"));
  EXPECT_EQ(launcher.results()[0].pid, -1);
  EXPECT_EQ(launcher.results()[0].Describe(), "did not start");
  EXPECT_EQ(launcher.Run().code(), absl::StatusCode::kFailedPrecondition);  // only once
}

TEST_F(LauncherTest, ProgramThatCannotStartNamesItsRank) {
  LaunchOptions options = Options({"exec sleep 60"});
  options.workers.push_back(WorkerSpec{{"/nonexistent/nereid-worker"}, {}});
  absl::Status status = Run(std::move(options));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_EQ(status.message(),
            "rank 1: cannot run '/nonexistent/nereid-worker': No such file or directory; stopped 1 other worker");
  EXPECT_EQ(results_[0].term_signal, SIGTERM);
  EXPECT_EQ(results_[1].pid, -1);
}

// True once `pid` has ended (gone, or a zombie waiting for its new parent).
bool ProcessEnded(pid_t pid) {
  FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (f == nullptr) return true;
  char state = '?';
  const int matched = std::fscanf(f, "%*d (%*[^)]) %c", &state);
  std::fclose(f);
  return matched == 1 && (state == 'Z' || state == 'X');
}

TEST_F(LauncherTest, WorkersDieWithTheLauncher) {
  const std::string pid_file = TestTmpDir() + "/worker_pid";
  unlink(pid_file.c_str());
  const pid_t launcher_pid = fork();
  ASSERT_GE(launcher_pid, 0);
  if (launcher_pid == 0) {
    LaunchOptions options = Options(
        {absl::StrCat("echo $$ > '", pid_file, ".tmp' && mv '", pid_file, ".tmp' '", pid_file, "' && exec sleep 60")});
    options.handle_signals = false;
    RunWorkers(std::move(options)).IgnoreError();
    _exit(0);
  }
  // Wait for the worker to write its pid, then kill the launcher outright.
  pid_t worker_pid = -1;
  const steady_clock::time_point start = steady_clock::now();
  while (worker_pid < 0 && steady_clock::now() - start < kHangGuard) {
    if (FILE* f = std::fopen(pid_file.c_str(), "r")) {
      if (std::fscanf(f, "%d", &worker_pid) != 1) worker_pid = -1;
      std::fclose(f);
    }
    if (worker_pid < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(worker_pid, 0);
  ASSERT_EQ(kill(launcher_pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher_pid, &status, 0), launcher_pid);
  // PR_SET_PDEATHSIG takes the orphaned worker down with it.
  while (!ProcessEnded(worker_pid) && steady_clock::now() - start < kHangGuard) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ProcessEnded(worker_pid)) << "worker " << worker_pid << " outlived its launcher";
}

TEST_F(LauncherTest, InvalidOptions) {
  EXPECT_EQ(RunWorkers(LaunchOptions()).code(), absl::StatusCode::kInvalidArgument);
  LaunchOptions options = Options({"true"});
  options.workers.push_back(WorkerSpec{});
  EXPECT_EQ(RunWorkers(options), absl::InvalidArgumentError("rank 1: empty argv"));
  options = Options({"true"});
  options.progress_timeout = absl::ZeroDuration();
  EXPECT_EQ(RunWorkers(options).code(), absl::StatusCode::kInvalidArgument);
  options = Options({"true"});
  options.grace = absl::Seconds(-1);
  EXPECT_EQ(RunWorkers(options).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
