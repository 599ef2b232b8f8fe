#ifndef NEREID_COMM_COLLECTIVE_CHECKS_H_
#define NEREID_COMM_COLLECTIVE_CHECKS_H_

// The argument checks every communicator backend makes before moving a byte,
// with one wording across backends. `where` names the call ("gloo/tcp
// allgather (tag 3, rank 0 of 4)"); each returns InvalidArgument or OK.

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

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

}  // namespace nereid

#endif  // NEREID_COMM_COLLECTIVE_CHECKS_H_
