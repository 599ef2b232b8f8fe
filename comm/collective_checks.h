#ifndef NEREID_COMM_COLLECTIVE_CHECKS_H_
#define NEREID_COMM_COLLECTIVE_CHECKS_H_

// The argument checks every communicator backend makes before moving a byte,
// with one wording across backends. `where` names the call ("gloo/tcp
// allgather (tag 3, rank 0 of 4)"); each returns InvalidArgument or OK.
// Also the cases the host backends (Gloo, shm) settle without their peers,
// and the failure that leaves such a backend unusable.

#include <cstddef>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace nereid {

// Every call (and a connect): the timeout is positive.
absl::Status CheckTimeout(const std::string& where, absl::Duration timeout);
// ReduceScatter: the input holds world x output elements.
absl::Status CheckReduceScatterSizes(const std::string& where, size_t input, size_t output, int world);
// AllGather: the output holds world x input elements.
absl::Status CheckAllGatherSizes(const std::string& where, size_t input, size_t output, int world);
// Broadcast: the root is a rank of the world.
absl::Status CheckRoot(const std::string& where, int root, int world);
// Send and Recv: the peer is another rank of the world.
absl::Status CheckPeer(const std::string& where, int peer, int rank, int world);
// SendRecv: `to` and `from` are both this rank or both other ranks.
absl::Status CheckSendRecvPeers(const std::string& where, int to, int from, int rank, int world);

// ReduceScatter and AllGather, their sizes checked: true when the call needs
// no peer, `out` then final (nothing to move, or world 1: a copy of `in`).
bool CollectedLocally(absl::Span<const float> in, absl::Span<float> out, int world);
// SendRecv with `to` and `from` both this rank: copies `send` into `recv`;
// InvalidArgument if their sizes differ.
absl::Status SendRecvToSelf(const std::string& where, absl::Span<const float> send, absl::Span<float> recv);

// The first failure that left a backend unusable: a timeout, a lost peer or
// an abort (DeadlineExceeded, Unavailable, Cancelled). Thread-safe.
class FailureLatch {
 public:
  // OK, or FailedPrecondition naming `where` and quoting the first failure.
  absl::Status CheckUsable(const std::string& where) const;
  // Remembers `status` if it is the first such failure; returns it.
  absl::Status Record(absl::Status status);

 private:
  // std::mutex, not absl::Mutex: Debian's Abseil is not built with TSan,
  // which would not see its locking (transfers on several threads fail at
  // once when a rank aborts them).
  mutable std::mutex mu_;
  absl::Status broken_;  // guarded by mu_
};

}  // namespace nereid

#endif  // NEREID_COMM_COLLECTIVE_CHECKS_H_
