#ifndef NEREID_COMM_SELF_DELIVERY_H_
#define NEREID_COMM_SELF_DELIVERY_H_

// Send and Recv between a rank and itself, for any backend: a plan may place
// both ends of a pair on one rank (a parameter server colocated with a
// worker pushes to itself), and the backends (Gloo, NCCL) have no pair to
// their own rank. A Send to this rank copies its data into a mailbox under
// its tag and returns; a Recv from this rank takes the oldest message of its
// tag, waiting up to the timeout (DeadlineExceeded naming the tag) or until
// the abort signal fires (Cancelled). Sizes must match (InvalidArgument).
// Everything else, and transfers with other ranks, go to the inner
// communicator unchanged. Self-deliveries move no bytes on the wire, so the
// traffic counters are the inner communicator's.
//
// Thread-safe as the inner communicator is; the mailbox has its own lock.

#include <memory>

#include "comm/communicator.h"

namespace nereid {

class SelfDeliveringCommunicator : public Communicator {
 public:
  virtual Communicator& inner() = 0;
};

std::unique_ptr<Communicator> WithSelfDelivery(std::unique_ptr<Communicator> inner);

}  // namespace nereid

#endif  // NEREID_COMM_SELF_DELIVERY_H_
