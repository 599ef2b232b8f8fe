#ifndef NEREID_COMM_SHM_COMMUNICATOR_H_
#define NEREID_COMM_SHM_COMMUNICATOR_H_

// The shm backend: Communicator for ranks on one host, through a shared-memory
// segment (shm_transport.h) instead of TCP over loopback.
//
// Algorithms (all over the transport's streaming exchange):
//   AllReduce      ring reduce-scatter then ring all-gather
//                  (ring_collectives.h); 16-bit wire formats are encoded into
//                  the shared buffer and added out of it in float32, each
//                  chunk rounded once by its owner: every rank ends bitwise
//                  equal, as with Gloo.
//   ReduceScatter  ring, adding straight out of the shared buffer.
//   AllGather      ring.
//   Broadcast      binomial tree from `root` (Gloo's, so the traffic formula
//                  is the same).
//   Send / Recv    one message; Send returns once the receiver has posted
//                  its Recv and every piece is in the shared buffer.
//   SendRecv       both at once (a ring of ranks that all send cannot
//                  deadlock).
//   Barrier        dissemination (log2 n rounds of 4-byte tokens).
// Keys: the operation in the high 32 bits, the tag in the low, so the same
// tag on different operations never meets.
//
// Errors and thread-safety are Gloo's (gloo_communicator.h): calls with
// distinct tags may run at once from different threads; a timeout, an exited
// peer (Unavailable, noticed within 50 ms rather than at the timeout) or an
// abort leaves the communicator unusable, later calls FailedPrecondition
// quoting the first error. Zero-element calls and world 1 move nothing.

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/collective_checks.h"
#include "comm/communicator.h"
#include "comm/rendezvous.h"
#include "comm/ring_collectives.h"
#include "comm/shm_progress.h"
#include "comm/shm_segment.h"
#include "comm/shm_transport.h"
#include "comm/traffic_accounting.h"

namespace nereid {

class ShmCommunicator final : public Communicator, private AsyncPointToPoint {
 public:
  ShmCommunicator(std::unique_ptr<ShmSegment> segment, std::unique_ptr<ShmTransport> transport);

  int rank() const override { return transport_->rank(); }
  int world() const override { return transport_->world(); }
  std::string backend() const override { return "shm"; }

  absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) override;
  absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& options) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out, const CollectiveOptions& options) override;
  absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) override;
  absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) override;
  absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                        const CollectiveOptions& options) override;
  absl::Status Barrier(const CollectiveOptions& options) override;
  TrafficCounters traffic() const override { return meter_.Snapshot(); }
  // Send and Recv driven by one progress thread (shm_progress.h).
  AsyncPointToPoint* async_point_to_point() override { return this; }

 private:
  std::string Where(const char* op, uint32_t tag, const std::string& peers) const;
  // The deadline of a call, or why it cannot start (an earlier failure, a
  // timeout that is not positive).
  absl::StatusOr<absl::Time> Begin(const char* op, const CollectiveOptions& options) const;
  // Remembers a failure that leaves the communicator unusable.
  absl::Status Finish(absl::Status status) { return failure_.Record(std::move(status)); }
  // One ring step's exchange with this rank's neighbours under `key`.
  RingExchange Ring(const char* op_name, uint64_t key, absl::Time deadline, const CollectiveOptions& options);
  // Moves float spans whole (memcpy in, memcpy out).
  absl::Status Move(uint64_t key, absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                    absl::Time deadline, AbortSignal* abort, const std::string& where);

  void StartSend(absl::Span<const float> data, int peer, const CollectiveOptions& options, Done done) override;
  void StartRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, Done done) override;
  // Hands one message's transfer to the progress engine.
  void StartMove(const char* op, absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                 const CollectiveOptions& options, Done done);

  std::unique_ptr<ShmSegment> segment_;
  std::unique_ptr<ShmTransport> transport_;
  TrafficMeter meter_;
  FailureLatch failure_;
  // Last: it stops (and its thread, which uses the members above) first.
  ShmProgressEngine progress_{transport_.get()};
};

// OK if `world` ranks can use the shm transport here: at most kMaxWorld, and
// /dev/shm has room for the segment (about 2 MiB per ordered pair of ranks).
absl::Status ShmFits(int world);

// Joins `world` ranks of one host: rank 0 creates the segment and publishes
// its name in `store` ("shm/segment"), the others open it; rank 0 removes the
// name once every rank has attached. Bounded by `timeout`.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectShm(RendezvousStore& store, int rank, int world,
                                                         absl::Duration timeout);

}  // namespace nereid

#endif  // NEREID_COMM_SHM_COMMUNICATOR_H_
