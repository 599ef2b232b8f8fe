#include "runtime/cli/local_launch.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "comm/fault_plan.h"
#include "runtime/checkpoint.h"
#include "runtime/cli/command.h"
#include "runtime/launcher/launcher.h"
#include "runtime/launcher/split_threads.h"

namespace nereid {
namespace {

bool Named(const std::string& arg, const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (arg == f || arg.rfind(f + "=", 0) == 0) return true;
  }
  return false;
}

// Rendezvous directories are named nereid-run-<launcher pid>-XXXXXX; those
// of launchers no longer running (killed with SIGKILL, which leaves no chance
// to clean up) are removed before a new one is made.
constexpr char kStorePrefix[] = "nereid-run-";

void RemoveStaleStores(const std::filesystem::path& temp) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(temp, ec)) {
    const std::string file = entry.path().filename().string();
    absl::string_view name = file;
    if (!absl::ConsumePrefix(&name, kStorePrefix)) continue;
    const size_t dash = name.find('-');
    int pid = 0;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(entry.path());
  }
  for (const auto& path : stale) std::filesystem::remove_all(path, ec);
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
    RemoveStaleStores(std::filesystem::temp_directory_path());
    std::string store =
        (std::filesystem::temp_directory_path() / absl::StrCat(kStorePrefix, getpid(), "-XXXXXX")).string();
    if (mkdtemp(store.data()) == nullptr) {
      std::fprintf(stderr, "error: cannot create a rendezvous directory %s\n", store.c_str());
      return kExitFailure;
    }
    launcher::LaunchOptions options;
    options.progress_timeout = launch.worker_timeout;
    options.startup_timeout = std::max(launch.worker_timeout, absl::Minutes(2));
    for (int r = 0; r < launch.workers; ++r) {
      std::vector<std::string> argv = {exe, launch.command};
      argv.insert(argv.end(), passed.begin(), passed.end());
      for (const std::string& a : {std::string("--rendezvous"), "file:" + store, std::string("--rank"),
                                   absl::StrCat(r), std::string("--world"), absl::StrCat(launch.workers),
                                   std::string("--threads"), absl::StrCat(threads[r])}) {
        argv.push_back(a);
      }
      if (resume) argv.push_back("--resume");
      if (r == 0) argv.insert(argv.end(), launch.rank0_args.begin(), launch.rank0_args.end());
      options.workers.push_back({argv, {{kRestartEnvVar, absl::StrCat(restart)}}});
    }
    absl::Status status = launcher::RunWorkers(std::move(options));
    std::filesystem::remove_all(store, ec);
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
    std::fprintf(stderr, "restart %d/%d: %s; every worker starts again %s\n", restart + 1, launch.max_restarts,
                 std::string(status.message()).c_str(),
                 resume ? absl::StrCat("from ", last->path, " (step ", last->step, ")").c_str()
                        : "from the beginning (no checkpoint yet)");
  }
}

}  // namespace nereid
