#ifndef NEREID_COMM_COMMUNICATOR_H_
#define NEREID_COMM_COMMUNICATOR_H_

// The communicator: collectives and point-to-point transfers among the
// `world` workers of one training run. Backends (Gloo over TCP for CPU
// tensors, NCCL for GPU ones) and wrappers (fault injection, byte counting)
// implement this interface; nothing above comm/ names a backend.
//
// Every call names a tag and a timeout. The tag keeps concurrent or
// interleaved operations apart (the same call on every rank must use the same
// tag); the timeout bounds how long a call waits for its peers, so a dead or
// stopped peer ends in DeadlineExceeded or Unavailable naming the operation,
// never in a hang. Calls on one communicator must be issued in the same order
// on every rank (the collective engine guarantees it for the executor).
//
// Buffers are raw float32 spans: whole tensors or slices of them.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/abort_signal.h"
#include "comm/wire_format.h"

namespace nereid {

enum class ReduceOp { kSum, kAvg };

struct CollectiveOptions {
  uint32_t tag = 0;
  absl::Duration timeout = absl::Seconds(60);
  // AllReduce only: the number format on the wire (wire_format.h). Sums are
  // still taken in float32; every rank ends with the same values.
  WireType wire = WireType::kFloat32;
  // Send, Recv and SendRecv: fired, it ends the wait at once with Cancelled
  // (the rank is failing; its peers' messages are no longer wanted). The
  // communicator is unusable afterwards, as after a timeout.
  AbortSignal* abort = nullptr;
};

// Bytes this rank put on and took off the wire, by the algorithm each backend
// runs (e.g. ring allreduce of S bytes over n ranks: 2(n-1)/n * S each way).
struct TrafficCounters {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t calls = 0;
};

// Point-to-point transfers that a backend drives on a thread of its own, so
// that a rank with dozens of transfers pending (a parameter server's pushes
// and pulls) does not park a thread on each. `done` runs on the backend's
// thread; the spans stay valid until it runs. Transfers to the rank itself
// are not for this interface (the caller keeps them on Send and Recv).
class AsyncPointToPoint {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~AsyncPointToPoint() = default;
  virtual void StartSend(absl::Span<const float> data, int peer, const CollectiveOptions& options, Done done) = 0;
  virtual void StartRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, Done done) = 0;
};

// Collectives a backend enqueues on the caller's device stream and does not
// wait for (NCCL): the work runs when the stream reaches it, after what the
// stream had before it, and what the caller enqueues next runs after it.
// Calls must be made in the same order on every rank (the collective
// queue's). A failure after the enqueue (a peer gone, the work not done
// within options.timeout) aborts the communicator, which ends the stream's
// wait, and is reported by DeferredFailure.
class StreamCollectives {
 public:
  virtual ~StreamCollectives() = default;
  // `data` in the device memory of the communicator's device; `stream` the
  // stream's native handle (cudaStream_t as void*).
  // Each is its Communicator method's operation, enqueued.
  virtual absl::Status EnqueueAllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options,
                                        void* stream) = 0;
  virtual absl::Status EnqueueReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                            const CollectiveOptions& options, void* stream) = 0;
  virtual absl::Status EnqueueAllGather(absl::Span<const float> in, absl::Span<float> out,
                                        const CollectiveOptions& options, void* stream) = 0;
  virtual absl::Status EnqueueSendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                       const CollectiveOptions& options, void* stream) = 0;
  // NCCL matches these by issue order, not by tag: issue a rank's
  // transfers in one order every rank's agrees with (the executor issues
  // them in the rank's order of device transfers, ops/collective_schedule.h).
  virtual absl::Status EnqueueSend(absl::Span<const float> data, int peer, const CollectiveOptions& options,
                                   void* stream) = 0;
  virtual absl::Status EnqueueRecv(absl::Span<float> data, int peer, const CollectiveOptions& options,
                                   void* stream) = 0;
  // OK, or the first failure of enqueued work found so far (NCCL's
  // asynchronous error is checked now).
  virtual absl::Status DeferredFailure() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world() const = 0;
  // "gloo/tcp", "nccl", "fault(gloo/tcp)", ... for messages and metrics.
  virtual std::string backend() const = 0;

  // In place: every rank ends with the reduction of all ranks' `data`.
  virtual absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) = 0;
  // `data` holds world * chunk elements on every rank; rank r ends with the
  // reduction of chunk r in `out` (chunk elements).
  virtual absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                     const CollectiveOptions& options) = 0;
  // Each rank contributes `in` (same size on every rank); `out` (world *
  // in.size()) ends with rank 0's block first.
  virtual absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out,
                                 const CollectiveOptions& options) = 0;
  // `root`'s `data` is copied to every rank.
  virtual absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) = 0;
  virtual absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) = 0;
  virtual absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) = 0;
  virtual absl::Status Barrier(const CollectiveOptions& options) = 0;
  // Sends `send` to rank `to` and receives `recv` from rank `from`, both
  // posted before either is waited for, so ranks that all send first (a
  // shift around a ring) cannot deadlock. `to` and `from` are both this rank
  // (a local copy; sizes must match) or both other ranks. Backends without
  // it return Unimplemented.
  virtual absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                const CollectiveOptions& options) {
    return absl::UnimplementedError(backend() + " has no SendRecv");
  }

  // Totals since creation (thread-safe to read).
  virtual TrafficCounters traffic() const = 0;
  // The backend's own progress thread for Send and Recv, or null (callers
  // then run Send and Recv on threads of theirs).
  virtual AsyncPointToPoint* async_point_to_point() { return nullptr; }
  // Collectives on device streams (NCCL), or null (host backends).
  virtual StreamCollectives* stream_collectives() { return nullptr; }
};

}  // namespace nereid

#endif  // NEREID_COMM_COMMUNICATOR_H_
