#include "runtime/cli/local_launch.h"

#include <fcntl.h>
#include <sys/file.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/fault_plan.h"
#include "comm/run_token.h"
#include "comm/shm_segment.h"
#include "core/logging.h"
#include "graph/plan_io.h"
#include "runtime/checkpoint.h"
#include "runtime/cli/command.h"
#include "runtime/launcher/launcher.h"
#include "runtime/launcher/split_threads.h"
#include "runtime/progress_bar.h"

namespace nereid {
namespace {

bool Named(const std::string& arg, const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (arg == f || arg.rfind(f + "=", 0) == 0) return true;
  }
  return false;
}

// Each launch's rendezvous directory, nereid-run-XXXXXX, is held under an
// flock(2) on the directory for as long as its launcher runs. A launcher
// killed with SIGKILL leaves the directory but not the lock, so the next
// launch removes every such directory it can lock. A lock, not a pid: pids
// mean nothing across PID namespaces (containers, Bazel's sandboxes) that
// share a /tmp. The directory is made and locked under another name first,
// so no other launch ever sees it unlocked.
constexpr char kStorePrefix[] = "nereid-run-";

void RemoveStaleStores(const std::filesystem::path& temp) {
  std::error_code ec;
  std::vector<std::filesystem::path> candidates;
  for (const auto& entry : std::filesystem::directory_iterator(temp, ec)) {
    if (entry.path().filename().string().rfind(kStorePrefix, 0) == 0) candidates.push_back(entry.path());
  }
  for (const auto& path : candidates) {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) std::filesystem::remove_all(path, ec);  // its launcher is gone
    close(fd);
  }
}

// Makes a locked rendezvous directory; returns its path and the fd holding
// the lock (close it after removing the directory), or an empty path.
std::pair<std::string, int> MakeLockedStore(const std::filesystem::path& temp) {
  std::string fresh = (temp / "nereid-new-XXXXXX").string();
  if (mkdtemp(fresh.data()) == nullptr) return {"", -1};
  const int fd = open(fresh.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || flock(fd, LOCK_EX) != 0) {
    if (fd >= 0) close(fd);
    rmdir(fresh.c_str());
    return {"", -1};
  }
  const std::string store = (temp / (kStorePrefix + fresh.substr(fresh.size() - 6))).string();
  if (rename(fresh.c_str(), store.c_str()) != 0) {
    close(fd);
    rmdir(fresh.c_str());
    return {"", -1};
  }
  return {store, fd};
}

}  // namespace

int LaunchLocalWorkers(const LocalLaunch& launch) {
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    std::fprintf(stderr, "error: cannot find this program's path: %s\n", ec.message().c_str());
    return kExitFailure;
  }
  std::vector<int> threads =
      launch.threads > 0
          ? std::vector<int>(launch.workers, static_cast<int>(launch.threads))
          : launcher::SplitThreads(std::max(1, static_cast<int>(std::thread::hardware_concurrency())), launch.workers);
  std::vector<std::string> passed;
  const std::vector<std::string>& args = launch.args;
  bool resume = false;
  for (size_t i = 0; i < args.size(); ++i) {
    bool takes_value = args[i].rfind("--", 0) == 0 && args[i].find('=') == std::string::npos &&
                       !Named(args[i], launch.bool_flags);
    if (Named(args[i], launch.not_passed)) {
      if (takes_value) ++i;
      continue;
    }
    if (args[i] == "--resume") {  // added below, on every restart that has a checkpoint
      resume = true;
      continue;
    }
    passed.push_back(args[i]);
  }
  for (int restart = 0;; ++restart) {
    // A fresh store each time: rendezvous keys are written once.
    const std::filesystem::path temp = std::filesystem::temp_directory_path();
    RemoveStaleStores(temp);
    const auto [store, store_lock] = MakeLockedStore(temp);
    if (store.empty()) {
      std::fprintf(stderr, "error: cannot create a rendezvous directory in %s: %s\n", temp.c_str(),
                   std::strerror(errno));
      return kExitFailure;
    }
    launcher::LaunchOptions options;
    options.progress_timeout = launch.worker_timeout;
    options.startup_timeout = std::max(launch.worker_timeout, absl::Minutes(2));
    const int first_rank = launch.node_rank * launch.workers;
    const std::string rendezvous = launch.rendezvous.empty() ? "file:" + store : launch.rendezvous;
    const std::string plan_path = store + "/plan.plan.pb";
    if (launch.plan != nullptr) {
      if (absl::Status written = WritePlanFile(*launch.plan, plan_path); !written.ok()) {
        std::fprintf(stderr, "error: cannot hand the workers their plan: %s\n", std::string(written.message()).c_str());
        std::filesystem::remove_all(store, ec);
        close(store_lock);
        return kExitFailure;
      }
    }
    for (int r = 0; r < launch.workers; ++r) {
      std::vector<std::string> argv = {exe, launch.command};
      argv.insert(argv.end(), passed.begin(), passed.end());
      for (const std::string& a : {std::string("--rendezvous"), rendezvous, std::string("--rank"),
                                   absl::StrCat(first_rank + r), std::string("--world"),
                                   absl::StrCat(launch.nnodes * launch.workers), std::string("--threads"),
                                   absl::StrCat(threads[r])}) {
        argv.push_back(a);
      }
      argv.insert(argv.end(), launch.worker_args.begin(), launch.worker_args.end());
      if (launch.plan != nullptr) argv.insert(argv.end(), {"--plan-file", plan_path});
      if (resume) argv.push_back("--resume");
      if (first_rank + r == 0) argv.insert(argv.end(), launch.rank0_args.begin(), launch.rank0_args.end());
      std::vector<std::pair<std::string, std::string>> env = {{kRestartEnvVar, absl::StrCat(restart)},
                                                               {kRunTokenEnvVar, launch.token}};
      // Output reaches this terminal through the launcher, which redraws a
      // worker's progress bar in place: the worker draws one.
      if (isatty(fileno(stderr))) env.emplace_back(kProgressTerminalEnvVar, "1");
      options.workers.push_back({argv, std::move(env)});
    }
    absl::Status status = launcher::RunWorkers(std::move(options));
    std::filesystem::remove_all(store, ec);
    ShmSegment::RemoveAbandoned("nereid-");  // a worker killed while connecting leaves its segment's name
    close(store_lock);
    if (status.ok()) return kExitOk;
    if (restart == launch.max_restarts) {
      std::fprintf(stderr, "error: %s%s\n", std::string(status.message()).c_str(),
                   restart > 0 ? absl::StrCat(" (after ", restart, " restart", restart == 1 ? "" : "s", ")").c_str()
                               : "");
      return kExitFailure;
    }
    // Restart from the last checkpoint the failed run completed, if any.
    absl::StatusOr<Checkpoint> last = LoadLatestCheckpoint(launch.checkpoint_dir);
    if (!last.ok() && !absl::IsNotFound(last.status())) {
      std::fprintf(stderr, "error: %s; cannot restart: %s\n", std::string(status.message()).c_str(),
                   std::string(last.status().message()).c_str());
      return kExitFailure;
    }
    resume = last.ok();
    Log().warn("restart {}/{}: {}; every worker starts again {}", restart + 1, launch.max_restarts,
               std::string(status.message()),
               resume ? absl::StrCat("from ", last->path, " (step ", last->step, ")")
                      : "from the beginning (no checkpoint yet)");
  }
}

}  // namespace nereid
