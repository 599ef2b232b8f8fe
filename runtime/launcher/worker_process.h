#ifndef NEREID_RUNTIME_LAUNCHER_WORKER_PROCESS_H_
#define NEREID_RUNTIME_LAUNCHER_WORKER_PROCESS_H_

// SpawnWorker starts one worker process with fork + execve and hands back
// its pid and the launcher's ends of its pipes. In the child:
//   - stdin is /dev/null; stdout and stderr are pipes to the launcher;
//   - descriptor 3 (kWorkerProgressFd) is the write end of the progress pipe,
//     and NEREID_PROGRESS_FD=3 is in its environment;
//   - the environment is the launcher's, with `env` set on top (an entry
//     there replaces a variable of the same name);
//   - prctl(PR_SET_PDEATHSIG, SIGKILL) is set, and the child gives up if the
//     launcher is already gone, so a launcher that dies leaves no workers.
//     The death signal fires when the *thread* that spawned the worker exits,
//     so spawn from a thread that outlives the workers;
//   - handled signals go back to their default action, SIGPIPE too, and the
//     signal mask is empty. The child stays in the launcher's process group,
//     so a Ctrl-C at a terminal reaches the workers as well as the launcher.
// All of the launcher's descriptors are close-on-exec, so workers do not
// inherit one another's pipes. argv[0] without a '/' is looked up on PATH
// (the one in `env` if given there). Failing to exec is reported here as an
// error (e.g. NotFound), not as a worker that exits with 127.

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/launcher/unique_fd.h"

namespace nereid {
namespace launcher {

inline constexpr int kWorkerProgressFd = 3;

struct WorkerProcess {
  pid_t pid = -1;
  UniqueFd stdout_fd;  // read ends, non-blocking, close-on-exec
  UniqueFd stderr_fd;
  UniqueFd progress_fd;
  UniqueFd pidfd;  // readable when the process ends; invalid if the kernel lacks pidfd_open
};

absl::StatusOr<WorkerProcess> SpawnWorker(const std::vector<std::string>& argv,
                                          const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_WORKER_PROCESS_H_
