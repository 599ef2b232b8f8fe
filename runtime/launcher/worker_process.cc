#include "runtime/launcher/worker_process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "runtime/launcher/progress_reporter.h"

extern char** environ;

namespace nereid {
namespace launcher {
namespace {

absl::Status ErrnoStatus(int error, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(what, ": ", strerror(error)));
}

// A pipe whose ends are both close-on-exec; the read end is non-blocking.
absl::Status MakePipe(UniqueFd* read_end, UniqueFd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  if (fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK) != 0) return ErrnoStatus(errno, "fcntl");
  return absl::OkStatus();
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

absl::StatusOr<std::string> ResolveProgram(const std::string& name, const char* path_env) {
  if (name.find('/') != std::string::npos) return name;
  const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (absl::string_view dir : absl::StrSplit(search, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("'", name, "' was not found on PATH"));
}

// The launcher's environment with `overrides` set on top, as "KEY=VALUE" strings.
std::vector<std::string> BuildEnvironment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  absl::flat_hash_set<std::string> replaced;
  for (const auto& kv : overrides) replaced.insert(kv.first);
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq != absl::string_view::npos && replaced.contains(entry.substr(0, eq))) continue;
    out.emplace_back(entry);
  }
  for (const auto& kv : overrides) out.push_back(absl::StrCat(kv.first, "=", kv.second));
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Everything the child needs, prepared before fork(): after fork() only
// async-signal-safe calls are allowed (no allocation).
struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int stdin_fd, stdout_fd, stderr_fd, progress_fd;  // sources, dup'ed onto 0, 1, 2, 3
  int error_fd;                                     // gets errno if execve fails
};

[[noreturn]] void RunChild(const ChildPlan& plan) {
  // Handlers do not survive exec anyway; resetting them now keeps a signal
  // that arrives before exec from running the launcher's handlers here.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction current;
    if (sigaction(sig, nullptr, &current) != 0) continue;
    if (sig == SIGPIPE || (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN)) {
      struct sigaction dfl = {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(sig, &dfl, nullptr);
    }
  }
  int error = 0;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) error = errno;
  if (error == 0 && getppid() != plan.parent) error = ESRCH;  // the launcher died before prctl
  // Move the sources above the targets first so that no dup2 clobbers a
  // source that is still needed; dup2 clears close-on-exec on the target.
  const int sources[4] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd, plan.progress_fd};
  int moved[4] = {-1, -1, -1, -1};
  for (int i = 0; i < 4 && error == 0; ++i) {
    moved[i] = fcntl(sources[i], F_DUPFD_CLOEXEC, 10);
    if (moved[i] < 0) error = errno;
  }
  for (int target = 0; target < 4 && error == 0; ++target) {
    if (dup2(moved[target], target) < 0) error = errno;
  }
  if (error == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(plan.path, plan.argv, plan.envp);
    error = errno;
  }
  const ssize_t ignored = write(plan.error_fd, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

}  // namespace

absl::StatusOr<WorkerProcess> SpawnWorker(const std::vector<std::string>& argv,
                                          const std::vector<std::pair<std::string, std::string>>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::vector<std::pair<std::string, std::string>> overrides = env;
  overrides.emplace_back(kProgressFdEnv, absl::StrCat(kWorkerProgressFd));

  const char* path_env = getenv("PATH");
  for (const auto& kv : env) {
    if (kv.first == "PATH") path_env = kv.second.c_str();
  }
  absl::StatusOr<std::string> path = ResolveProgram(argv[0], path_env);
  if (!path.ok()) return path.status();
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> argv_c = CStrings(argv_copy);
  std::vector<std::string> env_strings = BuildEnvironment(overrides);
  std::vector<char*> env_c = CStrings(env_strings);

  WorkerProcess proc;
  UniqueFd out_w, err_w, progress_w, error_r, error_w;
  absl::Status s = MakePipe(&proc.stdout_fd, &out_w);
  if (s.ok()) s = MakePipe(&proc.stderr_fd, &err_w);
  if (s.ok()) s = MakePipe(&proc.progress_fd, &progress_w);
  if (s.ok()) s = MakePipe(&error_r, &error_w);
  if (!s.ok()) return s;
  // The error pipe's read end must block until exec closes the write end.
  fcntl(error_r.get(), F_SETFL, fcntl(error_r.get(), F_GETFL) & ~O_NONBLOCK);
  UniqueFd dev_null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return ErrnoStatus(errno, "/dev/null");

  const ChildPlan plan = {path->c_str(), argv_c.data(), env_c.data(),     getpid(),     dev_null.get(),
                          out_w.get(),   err_w.get(),   progress_w.get(), error_w.get()};
  // Block every signal across fork() so the child cannot run one of the
  // launcher's handlers before RunChild has reset them.
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) return ErrnoStatus(fork_errno, "fork");

  error_w.reset();
  out_w.reset();
  err_w.reset();
  progress_w.reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(error_r.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return ErrnoStatus(child_errno, absl::StrCat("cannot run '", *path, "'"));
  }
  proc.pid = pid;
  Log().debug("started process {}: {}", pid, absl::StrJoin(argv, " "));
#ifdef SYS_pidfd_open
  proc.pidfd.reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
#endif
  return proc;
}

}  // namespace launcher
}  // namespace nereid
