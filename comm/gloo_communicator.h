#ifndef NEREID_COMM_GLOO_COMMUNICATOR_H_
#define NEREID_COMM_GLOO_COMMUNICATOR_H_

// The Gloo backend: Communicator over Gloo's TCP transport, for CPU tensors.
//
// Algorithms (all with Gloo's options-style API, the call's tag as Gloo's tag
// and the call's timeout as Gloo's per-wait timeout):
//   AllReduce      gloo::allreduce, ring algorithm; kAvg = sum, then each
//                  element times 1/world. With a 16-bit wire format, our own
//                  ring (reduce-scatter, then allgather) that sends 16-bit
//                  values and adds in float32; each reduced chunk is rounded
//                  once by its owner, so every rank ends bitwise equal.
//   ReduceScatter  our own ring over Gloo unbound buffers (n-1 steps, each
//                  passing one chunk to the right neighbour and adding the one
//                  from the left). Gloo 2022-05 has no options-style
//                  reduce-scatter: its ReduceScatterHalvingDoubling is an
//                  old-style algorithm with neither tag nor per-call timeout.
//   AllGather      our own ring, as ReduceScatter's (n-1 steps, each passing
//                  one rank's block on). On 45 Mbit/s links gloo::allgather
//                  moved 3.5-3.9 MB/s where this ring moves 5.2-5.3 MB/s.
//   Broadcast      gloo::broadcast (binomial tree rooted at `root`).
//   Send / Recv    unbound buffer send/recv + waitSend/waitRecv. Gloo's TCP
//                  transport moves the data only once the receiver has posted
//                  its Recv, so Send returns after the matching Recv was
//                  posted: two ranks that both Send to each other first wait
//                  for each other until the timeout. Sizes must match.
//   SendRecv       both unbound buffers posted (recv, then send), then both
//                  waited for: a ring of ranks that all send cannot deadlock.
//   Barrier        gloo::barrier (dissemination barrier).
// Slots: Gloo's algorithms build their slot from their own prefix and the tag;
// ReduceScatter and Send/Recv use prefixes 0x80 and 0x81 with the tag, so the
// same tag on different operations never collides.
//
// Zero-element calls return OK without touching the network (on every rank
// alike, so nothing waits). With world 1 every collective is local.
//
// Errors: argument errors are InvalidArgument; Gloo exceptions become
// DeadlineExceeded (timeouts) or Unavailable (connection lost) naming the
// operation, tag, rank and peer (see gloo_status.h). A Gloo timeout closes
// every connection of the context (that is how Gloo's TCP transport unblocks
// other waiters), so after a DeadlineExceeded or Unavailable the communicator
// is unusable: later calls return FailedPrecondition quoting the first error.
//
// Thread-safety: calls may come from different threads at once if they use
// distinct tags. Gloo's options-style algorithms are written for that (each
// call creates its own unbound buffers; the TCP context and pairs lock their
// shared state, and the tag keeps slots apart), so no lock serialises calls
// here; every rank must still issue calls with the same tag in the same order.
// Traffic counters are atomics.

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/collective_checks.h"
#include "comm/communicator.h"
#include "comm/ring_collectives.h"
#include "comm/traffic_accounting.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace nereid {

struct GlooConnectOptions {
  // Address the TCP device binds to and advertises to its peers.
  std::string hostname = "127.0.0.1";
  // Bounds the rendezvous (waiting for the peers in the store) and the TCP
  // connects.
  absl::Duration connect_timeout = absl::Seconds(60);
};

class GlooCommunicator final : public Communicator {
 public:
  // `context` must be fully connected (connectFullMesh done).
  explicit GlooCommunicator(std::shared_ptr<gloo::Context> context);
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override;
  int world() const override;
  std::string backend() const override { return "gloo/tcp"; }

  absl::Status AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) override;
  absl::Status ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& options) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out,
                         const CollectiveOptions& options) override;
  absl::Status Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) override;
  absl::Status Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) override;
  absl::Status Barrier(const CollectiveOptions& options) override;
  absl::Status SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                        const CollectiveOptions& options) override;

  TrafficCounters traffic() const override { return meter_.Snapshot(); }

  // The Gloo context, for benchmarks that compare against raw Gloo calls.
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

 private:
  // "gloo/tcp allreduce (tag 3, rank 0 of 4, <peers>)".
  std::string Where(const char* op, uint32_t tag, const std::string& peers) const;
  // Checks the timeout and that no earlier failure broke the context.
  absl::StatusOr<std::chrono::milliseconds> Begin(const char* op, const CollectiveOptions& options) const;
  // Remembers the first error that left the context unusable.
  absl::Status Finish(absl::Status status) { return failure_.Record(std::move(status)); }
  std::string RingPeers() const;
  // One step of our own rings (ring_collectives.h) over unbound buffers, in
  // slot (`slot_prefix`, `tag`): each message whole through a staging buffer.
  RingExchange Ring(uint8_t slot_prefix, uint32_t tag, std::chrono::milliseconds timeout, const std::string& where);

  const std::shared_ptr<gloo::Context> context_;
  TrafficMeter meter_;
  FailureLatch failure_;
};

// Creates a TCP device on `options.hostname`, connects the full mesh of
// `world` ranks through `store` (already scoped to this run, e.g. by a
// gloo::rendezvous::PrefixStore) and wraps the context. Most callers want
// ConnectGloo (rendezvous.h), which also opens the store and checks that every
// rank runs the same plan.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGlooFullMesh(gloo::rendezvous::Store& store, int rank,
                                                                  int world, const GlooConnectOptions& options);

// A Duration as Gloo's millisecond timeout: rounded up to whole milliseconds,
// at most 7 days (longer waits overflow std::chrono deadlines). Not positive:
// InvalidArgument naming `what`.
absl::StatusOr<std::chrono::milliseconds> ToGlooTimeout(absl::Duration timeout, const std::string& what);

}  // namespace nereid

#endif  // NEREID_COMM_GLOO_COMMUNICATOR_H_
