#ifndef NEREID_COMM_LAUNCH_ENV_H_
#define NEREID_COMM_LAUNCH_ENV_H_

// Which rank this process is, and how many there are, from explicit values or
// from the variables the common launchers set.
//
// Explicit values (>= 0) win, each on its own. Otherwise the first launcher
// whose rank variable is set provides both values:
//   1. mpirun   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
//   2. Slurm    SLURM_PROCID / SLURM_NTASKS
//   3. torchrun RANK / WORLD_SIZE (MASTER_ADDR and MASTER_PORT, if set, are
//               reported too: RendezvousFromEnv makes them the store)
// The run id (the store prefix that keeps runs apart) is the first set of
// NEREID_RUN_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, else "default".
//
// Errors (InvalidArgument) name the variable: missing, not an integer, world
// size < 1, rank outside 0..world-1.

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace nereid {

// Returns the variable's value, or nullopt when it is unset. Tests pass fakes.
using EnvGetter = std::function<std::optional<std::string>(const std::string& name)>;

// getenv(3).
EnvGetter ProcessEnv();

struct LaunchInfo {
  int rank = 0;
  int world = 1;
  // Where they came from: "explicit", "mpirun", "slurm" or "torchrun"
  // ("explicit+slurm" when one value was explicit and the other not).
  std::string source;
  std::string master_addr;  // MASTER_ADDR, empty if unset
  int master_port = -1;     // MASTER_PORT, -1 if unset
  std::string run_id = "default";
};

// `rank` / `world` < 0 mean "not given".
absl::StatusOr<LaunchInfo> ResolveLaunch(int rank, int world, const EnvGetter& env);

// Whether a launcher's rank variable is set (this process is one of several).
bool HasLauncherEnv(const EnvGetter& env);

// Where a launched process meets its peers when no store is named:
// tcp://MASTER_ADDR:MASTER_PORT, served by rank 0 (comm/tcp_store.h). Under
// torchrun (TORCHELASTIC_RUN_ID set) torchrun's own agent already listens on
// MASTER_PORT, so the store takes the next port. Without MASTER_ADDR and
// MASTER_PORT it is FailedPrecondition: the processes have no way to meet,
// and training alone instead would be a silent error.
absl::StatusOr<std::string> RendezvousFromEnv(const LaunchInfo& info, const EnvGetter& env);

}  // namespace nereid

#endif  // NEREID_COMM_LAUNCH_ENV_H_
