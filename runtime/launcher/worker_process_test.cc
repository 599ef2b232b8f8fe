#include "runtime/launcher/worker_process.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace launcher {
namespace {

// Everything written to `fd` until EOF (at most 10 s).
std::string ReadToEof(int fd) {
  std::string out;
  char buf[4096];
  for (int polls = 0; polls < 1000; ++polls) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) return out;
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    if (n < 0 && errno != EAGAIN && errno != EINTR) break;
  }
  ADD_FAILURE() << "no EOF on fd " << fd;
  return out;
}

int Wait(pid_t pid) {
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

TEST(WorkerProcessTest, PipesEnvironmentAndStdin) {
  absl::StatusOr<WorkerProcess> p =
      SpawnWorker({"sh", "-c",
                   "echo out; echo err >&2; echo \"fd=$NEREID_PROGRESS_FD x=$NEREID_TEST_X\" >&$NEREID_PROGRESS_FD; "
                   "cat; echo \"stdin done\""},
                  {{"NEREID_TEST_X", "42"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(p->pid, 0);
  EXPECT_EQ(ReadToEof(p->stdout_fd.get()), "out\nstdin done\n");  // stdin is /dev/null: cat ends at once
  EXPECT_EQ(ReadToEof(p->stderr_fd.get()), "err\n");
  EXPECT_EQ(ReadToEof(p->progress_fd.get()), "fd=3 x=42\n");
  const int status = Wait(p->pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(WorkerProcessTest, EnvironmentEntriesReplaceInheritedOnes) {
  setenv("NEREID_TEST_Y", "old", 1);
  absl::StatusOr<WorkerProcess> p =
      SpawnWorker({"/bin/sh", "-c", "env | grep '^NEREID_TEST_Y='"}, {{"NEREID_TEST_Y", "new"}});
  unsetenv("NEREID_TEST_Y");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ReadToEof(p->stdout_fd.get()), "NEREID_TEST_Y=new\n");
  Wait(p->pid);
}

TEST(WorkerProcessTest, SignalsAreDefaultAndUnblockedInTheChild) {
  // Block SIGTERM here; the worker must still die of it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  absl::StatusOr<WorkerProcess> p = SpawnWorker({"/bin/sh", "-c", "echo up; exec sleep 30"}, {});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  char c;
  pollfd pfd = {p->stdout_fd.get(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1);
  ASSERT_EQ(read(p->stdout_fd.get(), &c, 1), 1);
  ASSERT_EQ(kill(p->pid, SIGTERM), 0);
  const int status = Wait(p->pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
}

TEST(WorkerProcessTest, PidfdBecomesReadableAtExit) {
  absl::StatusOr<WorkerProcess> p = SpawnWorker({"/bin/true"}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  if (p->pidfd.valid()) {
    pollfd pfd = {p->pidfd.get(), POLLIN, 0};
    EXPECT_EQ(poll(&pfd, 1, 10000), 1);
  }
  Wait(p->pid);
}

TEST(WorkerProcessTest, MissingProgramIsAnError) {
  absl::StatusOr<WorkerProcess> p = SpawnWorker({"/nonexistent/nereid-worker"}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("cannot run '/nonexistent/nereid-worker'"), absl::string_view::npos)
      << p.status();
  p = SpawnWorker({"nereid-no-such-program"}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("not found on PATH"), absl::string_view::npos) << p.status();
  p = SpawnWorker({}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  // The failed exec was reaped.
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(WorkerProcessTest, NotExecutableIsAnError) {
  absl::StatusOr<WorkerProcess> p = SpawnWorker({"/dev/null"}, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied) << p.status();
}

}  // namespace
}  // namespace launcher
}  // namespace nereid
