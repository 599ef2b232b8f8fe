#ifndef NEREID_COMM_FAULT_PLAN_H_
#define NEREID_COMM_FAULT_PLAN_H_

// A fault plan: which communicator calls misbehave, and how. Parsed from a
// string so that a multi-process test can inject faults through the
// environment variable NEREID_FAULTS.
//
// Syntax: a comma-separated list of faults, each optionally prefixed by
// "restart=A:" to apply only in the launcher's A-th restart (0: the first
// run; NEREID_RESTART says which this is; --max-restarts) and then by
// "rank=R:" to apply only on rank R. Calls are numbered from 1 on each
// communicator, counting every call (AllReduce, ReduceScatter, AllGather,
// Broadcast, Send, Recv, Barrier).
//   delay=200ms      sleep before every call (any absl::ParseDuration text:
//                    "1.5s", "20ms", ...)
//   delay=200ms@3    sleep before call 3 only
//   drop@5           call 5 does not communicate and returns OK (its peers
//                    then time out)
//   kill@3           raise SIGKILL in this process at call 3, before it
//                    communicates
//   stop@3           raise SIGSTOP in this process at call 3 (a hung rank:
//                    it neither exits nor answers)
//   corrupt@2        after call 2 succeeds, change element 0 of its output
//                    (x -> -x, 0 -> 1); no effect on Send and Barrier, which
//                    have no output
//   slow=30ms        not a communicator fault: every training step of this
//                    rank computes 30 ms longer (the executor holds a core
//                    that long at the step's first node: exactly so with
//                    --threads 1), a slow machine rather than a slow link
//                    (stragglers in benches and tests)
// Example: NEREID_FAULTS="rank=1:kill@3,delay=50ms";
// NEREID_FAULTS="restart=0:rank=1:kill@30" kills rank 1 in the first run only.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/launch_env.h"

namespace nereid {

inline constexpr char kFaultsEnvVar[] = "NEREID_FAULTS";
// Which restart of the run this process belongs to (the launcher sets it).
inline constexpr char kRestartEnvVar[] = "NEREID_RESTART";

struct Fault {
  enum class Kind { kDelay, kDrop, kKill, kStop, kCorrupt, kSlow };
  Kind kind = Kind::kDelay;
  int64_t call = 0;  // 1-based; 0 means every call (delay only)
  absl::Duration delay = absl::ZeroDuration();  // kDelay, kSlow
  int rank = -1;     // -1: every rank
  int restart = -1;  // -1: every run (see "restart=A:")

  bool AppliesTo(int r, int64_t call_number) const {
    return (rank < 0 || rank == r) && (call == 0 || call == call_number);
  }
};

struct FaultPlan {
  std::vector<Fault> faults;

  // The faults that apply on `rank`.
  FaultPlan ForRank(int rank) const;
  // The faults that apply in restart `restart`.
  FaultPlan ForRestart(int restart) const;
  bool empty() const { return faults.empty(); }
  // The extra compute per training step the kSlow faults give `rank`.
  absl::Duration SlowStepFor(int rank) const;
  // Parses back to the same plan.
  std::string ToString() const;
};

// An empty or all-blank string is the empty plan.
absl::StatusOr<FaultPlan> ParseFaultPlan(absl::string_view text);

// The plan in NEREID_FAULTS (empty if unset), the faults of this restart
// (NEREID_RESTART, 0 if unset) only; errors name the variable.
absl::StatusOr<FaultPlan> FaultPlanFromEnv(const EnvGetter& env);

}  // namespace nereid

#endif  // NEREID_COMM_FAULT_PLAN_H_
