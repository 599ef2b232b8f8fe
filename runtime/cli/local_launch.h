#ifndef NEREID_RUNTIME_CLI_LOCAL_LAUNCH_H_
#define NEREID_RUNTIME_CLI_LOCAL_LAUNCH_H_

// `--workers N` on one machine: runs N copies of this program's `command`,
// each told its rank, the world size and a fresh file-store rendezvous (or,
// with --nnodes, the one every machine names), under the launcher's
// supervision (runtime/launcher/).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "graph/graph.pb.h"

namespace nereid {

struct LocalLaunch {
  std::string command;                  // "run", "bench"
  std::vector<std::string> args;        // the command's own arguments
  std::vector<std::string> not_passed;  // value flags the workers must not get
  std::vector<std::string> bool_flags;  // flags that take no value
  int workers = 1;
  int64_t threads = 0;                  // per worker; 0 = split this machine's cores
  absl::Duration worker_timeout = absl::Minutes(5);
  std::vector<std::string> rank0_args;  // extra arguments for rank 0 only
  std::vector<std::string> worker_args; // extra arguments for every worker
  // The plan the launcher built once (plan/build_plan.h): written beside the
  // rendezvous and handed to every worker as `--plan-file PATH`.
  const PlanDef* plan = nullptr;
  // Elastic restarts: when a worker dies, hangs or fails, every worker is
  // stopped and the run started again, up to `max_restarts` times, from the
  // last checkpoint in `checkpoint_dir` (`--resume` added), or from the start
  // if there is none yet. Each restart gets a fresh rendezvous, a line on
  // stderr saying why and from where, and NEREID_RESTART=<n> in its workers'
  // environment (fault plans may target one restart: comm/fault_plan.h).
  int max_restarts = 0;
  std::string checkpoint_dir;
  // Across machines (--nnodes M --node-rank K): this machine's workers are
  // ranks K*N .. K*N+N-1 of M*N, meeting at `rendezvous` (the same on every
  // machine) instead of a fresh local file store; no restarts.
  int nnodes = 1;
  int node_rank = 0;
  std::string rendezvous;
  // The run's secret token (comm/run_token.h), handed to every worker in
  // NEREID_TOKEN, never on a command line (which other users can read); ""
  // for none (--insecure).
  std::string token;
};

// Returns the process exit code (0 when every worker of the last run succeeded).
int LaunchLocalWorkers(const LocalLaunch& launch);

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_LOCAL_LAUNCH_H_
