#ifndef NEREID_OPS_COLLECTIVE_QUEUE_H_
#define NEREID_OPS_COLLECTIVE_QUEUE_H_

// What a communication kernel sees of its worker's collectives: a queue that
// runs each submitted piece of work on the communicator in one fixed
// (step, bucket) order on every rank. The scheduler implements it
// (schedulers/collective_engine.h); kernels only submit, so ops/ needs no
// scheduler and a test can hand a kernel a queue of its own.

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/abort_signal.h"
#include "comm/communicator.h"

namespace nereid {

class CollectiveQueue {
 public:
  using Work = std::function<absl::Status(Communicator&)>;
  using Done = std::function<void(absl::Status)>;

  virtual ~CollectiveQueue() = default;

  // Queues `work` for key (step, bucket); `done` gets its status on the
  // queue's thread. Out-of-range keys fail at once.
  virtual void Submit(int64_t step, int bucket, Work work, Done done) = 0;
  // The bound each collective's options should carry (a dead or stopped peer).
  virtual absl::Duration timeout() const = 0;
  // The ranks its collectives span.
  virtual int world() const = 0;
  // Of the time spent inside collectives, the part a compressing kernel spent
  // encoding and decoding (reported from inside its work).
  virtual void AddCodecTime(absl::Duration d) = 0;
};

// Point-to-point transfers (Send and Recv nodes): each submitted transfer
// starts at once and runs beside the others, so a rank that sends and
// receives in either order never waits on its own queue. Transfers between a
// pair of ranks are told apart by their tag, not by their order.
class PointToPointChannel {
 public:
  using Work = std::function<absl::Status(Communicator&)>;
  using Done = std::function<void(absl::Status)>;

  virtual ~PointToPointChannel() = default;

  // Runs `work` on a thread of its own; `done` gets its status there.
  virtual void Submit(Work work, Done done) = 0;
  // One message whose size both sides know; `data` stays valid until `done`.
  // A channel whose communicator drives transfers itself
  // (Communicator::async_point_to_point) hands it there, holding no thread.
  virtual void SubmitSend(absl::Span<const float> data, int peer, const CollectiveOptions& options, Done done) {
    Submit([data, peer, options](Communicator& comm) { return comm.Send(data, peer, options); }, std::move(done));
  }
  virtual void SubmitRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, Done done) {
    Submit([data, peer, options](Communicator& comm) { return comm.Recv(data, peer, options); }, std::move(done));
  }
  virtual absl::Duration timeout() const = 0;
  // Transfers pass it to the communicator (CollectiveOptions.abort); the
  // executor fires it when the rank fails, ending every transfer's wait.
  virtual AbortSignal* abort_signal() = 0;
};

}  // namespace nereid

#endif  // NEREID_OPS_COLLECTIVE_QUEUE_H_
