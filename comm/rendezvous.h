#ifndef NEREID_COMM_RENDEZVOUS_H_
#define NEREID_COMM_RENDEZVOUS_H_

// Rendezvous: how the ranks of one run find each other and agree they run the
// same thing before connecting Gloo.
//
// ConnectGloo opens the store named by the spec (rendezvous_spec.h), scoped to
// the run by a gloo::rendezvous::PrefixStore ("nereid/<run_id>"), and then,
// before Gloo's connectFullMesh:
//   1. writes this rank's identity (worker_identity.h) under "ident/<rank>";
//   2. rank 0 reads every other rank's identity as it appears; each other
//      rank reads rank 0's. A difference is FailedPrecondition naming the
//      field, both values and both ranks ("rank 1 has plan fingerprint
//      1234abcd but rank 0 has 99ff0012");
//   3. rank 0 writes its verdict under "ident/verdict" (ok, a mismatch, or
//      the ranks that never appeared) and the other ranks wait for it, so a
//      mismatch between ranks 0 and 2 also stops rank 1 at once instead of
//      leaving it waiting in connectFullMesh.
// All waits are bounded by options.connect_timeout: a peer that never appears
// is DeadlineExceeded naming the missing ranks and the store. Ranks other
// than 0 wait for the verdict up to connect_timeout + 2 s after they saw rank
// 0's identity, so that rank 0's report of a missing rank reaches them.
//
// Waiting: this Gloo (2022-05) offers Store::wait(keys, timeout), but its
// FileStore and RedisStore measure the elapsed time in whole seconds (a 500 ms
// timeout fires after 1 s, 2.5 s after 3 s) and cannot say which keys are
// missing. So the identity exchange polls each key with the stores' own
// non-blocking check() every 10 ms against its own deadline, and only get()s
// keys that exist. Gloo's connectFullMesh then waits for the peers' addresses
// with the context timeout (= connect_timeout).
//
// Keys are written once: reusing a run id in the same store fails with
// AlreadyExists on the first rank whose key is taken. In Redis, a run's keys
// expire an hour after its ranks have met (ConnectGloo), so a shared store
// does not fill up and the run id is free again after that.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/rendezvous_spec.h"
#include "comm/worker_identity.h"

namespace nereid {

// `identity.world_size` 0 means `world`; any other value must equal `world`.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const RendezvousSpec& spec, int rank, int world,
                                                          const WorkerIdentity& identity,
                                                          const GlooConnectOptions& options);

// --- The same rendezvous for other backends (added for ConnectNccl) ---------
//
// OpenRendezvous runs ConnectGloo's first part alone: it opens the store named
// by `spec` (scoped to the run) and runs the identity exchange above, each
// wait bounded by `timeout`. It does not connect Gloo; instead it hands back
// the run's store so that the caller can exchange its own keys (NCCL's unique
// id). Validation and errors are those of ConnectGloo.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // "file:/tmp/x (run 'abc')", for messages.
  virtual const std::string& name() const = 0;
  // Writes `value` under the run's `key`; keys are write-once (AlreadyExists).
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Polls for `key` every 10 ms and returns its value; DeadlineExceeded if it
  // has not appeared within `timeout`.
  virtual absl::StatusOr<std::string> WaitAndGet(const std::string& key, absl::Duration timeout) = 0;
};

absl::StatusOr<std::unique_ptr<RendezvousStore>> OpenRendezvous(const RendezvousSpec& spec, int rank, int world,
                                                                const WorkerIdentity& identity,
                                                                absl::Duration timeout);

}  // namespace nereid

#endif  // NEREID_COMM_RENDEZVOUS_H_
