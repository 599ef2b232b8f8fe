#ifndef NEREID_COMM_NCCL_COMMUNICATOR_H_
#define NEREID_COMM_NCCL_COMMUNICATOR_H_

// The NCCL backend: Communicator over NCCL, for GPU tensors.
//
// DEVICE BUFFERS: every float span given to this communicator points at CUDA
// device memory (cudaMalloc, or managed memory) on the communicator's device;
// the span's size is the element count. Host pointers are rejected with
// InvalidArgument (checked with cudaPointerGetAttributes), never dereferenced.
//
// Operations (one NCCL call each, on the communicator's own CUDA stream,
// except the 16-bit allreduce's coding around its call):
//   AllReduce      ncclAllReduce, ncclSum; kAvg = ncclAvg. With a 16-bit
//                  wire (CollectiveOptions::wire) the values are encoded on
//                  the stream (wire_format_gpu.h) into stream-ordered
//                  scratch, summed by NCCL in that type, decoded, and for
//                  kAvg scaled by 1/world in float32: three kernels and the
//                  NCCL call. Close to the host's 16-bit ring, not bit for
//                  bit: here every rank's own value is rounded to 16 bits
//                  before the first addition (a world of one too, where the
//                  host returns the value untouched), and NCCL picks its own
//                  summation order. The other operations move float32
//                  whatever the wire.
//   ReduceScatter  ncclReduceScatter (kAvg = ncclAvg).
//   AllGather      ncclAllGather.
//   Broadcast      ncclBroadcast, in place.
//   Send / Recv    ncclSend / ncclRecv, each inside ncclGroupStart/End. As
//                  with Gloo, a Send may not complete until the peer posts
//                  the matching Recv (sizes must match).
//   SendRecv       ncclSend and ncclRecv in one group (never deadlocks).
//   Barrier        ncclAllReduce (sum) of one float in a device buffer the
//                  communicator owns.
// NCCL picks its own algorithms (ring, tree, NVLS, ...) per call.
//
// Ordering and synchronisation: each call is enqueued on the communicator's
// stream and the call returns only when that stream has finished it, so the
// result is ready for any stream when the call returns. The stream is created
// with default flags: work the caller queued on the legacy default stream
// (cudaMemcpy, kernels launched without a stream) runs before the collective;
// data produced on any other stream must be synchronised by the caller first.
//
// TAGS: accepted and quoted in messages, but NCCL does not match operations
// by tag: it matches them by issue order on the communicator. Every rank must
// therefore issue all its calls in the same order (which the Communicator
// contract already requires). Calls from several threads are serialised by a
// mutex (NCCL communicators are not thread-safe); calls issued concurrently
// from several threads are safe only if every rank takes them in the same
// order, so issue them from one thread.
//
// Timeouts: after enqueueing, the call polls cudaStreamQuery and
// ncclCommGetAsyncError until the work is done or the call's timeout has
// passed. On timeout the NCCL communicator is aborted (ncclCommAbort, which
// also stops the kernel waiting for its peers) and the call returns
// DeadlineExceeded naming the operation, tag and rank. NCCL asynchronous
// errors (a peer's connection lost, ...) and CUDA errors also abort it. After
// an abort the communicator is unusable: later calls return
// FailedPrecondition quoting the first error. Argument errors (sizes, root,
// peer, host pointers, NCCL's ncclInvalidArgument/ncclInvalidUsage returned
// at enqueue time) leave it usable.
//
// Zero-element calls return OK without launching anything (on every rank
// alike, so nothing waits). World 1 is allowed and runs through NCCL.
//
// Traffic: counted with the same formulas as the Gloo backend
// (traffic_accounting.h: ring allreduce, ring allgather, ring reduce-scatter,
// binomial-tree broadcast, exact send/recv, 0 for a barrier) so that backends
// compare; they are not a measurement of the algorithm NCCL actually chose.
//
// The CUDA device: calls make the communicator's device current for their
// duration and then restore the caller's current device.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "comm/rendezvous_spec.h"
#include "comm/traffic_accounting.h"
#include "comm/worker_identity.h"

namespace nereid {

class NcclCommunicator final : public Communicator, private StreamCollectives {
 public:
  // Wraps `comm`, a fully initialised NCCL communicator on CUDA device
  // `device`, and takes ownership of it (also when this fails: then it is
  // aborted). Creates the communicator's stream and barrier buffer on
  // `device`. Most callers want ConnectNccl.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(ncclComm_t comm, int device);

  // Finalises the NCCL communicator (bounded wait; aborted if the peers do
  // not quiesce in time) and frees the stream and the barrier buffer.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  // The CUDA device the buffers must live on.
  int device() const { return device_; }

  // All spans: device memory on device() (see the file comment).
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

  // Collectives on the caller's stream (collectives placed on the GPU):
  // each call returns once NCCL has it enqueued; a watchdog thread then
  // polls the work's events and NCCL's asynchronous error, and aborts the
  // communicator on an error or when options.timeout passes, counted from
  // when the stream reaches the call, with the work not done (the aborted
  // NCCL kernels end, so the stream does not hang); DeferredFailure reports
  // it, and later calls fail as after any abort. The same checks and NCCL
  // calls as the blocking forms above.
  StreamCollectives* stream_collectives() override { return this; }
  absl::Status EnqueueAllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options,
                                void* stream) override;
  absl::Status EnqueueReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                    const CollectiveOptions& options, void* stream) override;
  absl::Status EnqueueAllGather(absl::Span<const float> in, absl::Span<float> out, const CollectiveOptions& options,
                                void* stream) override;
  absl::Status EnqueueSendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                               const CollectiveOptions& options, void* stream) override;
  absl::Status EnqueueSend(absl::Span<const float> data, int peer, const CollectiveOptions& options,
                           void* stream) override;
  absl::Status EnqueueRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, void* stream) override;
  absl::Status DeferredFailure() override;

 private:
  // A call enqueued on a caller's stream, which the watchdog follows until
  // `done` completes. Its deadline runs from when the
  // stream reaches it (`started` completes), not from its enqueue: a call
  // queued behind a long step's kernels is not late.
  struct Watched {
    cudaEvent_t started = nullptr;  // recorded before the call; null once complete
    cudaEvent_t done = nullptr;     // recorded after it
    absl::Duration timeout;
    absl::Time deadline = absl::InfiniteFuture();  // set when `started` completes
    std::string where;
  };
  // Destroys the events `w` holds.
  static void DestroyEvents(Watched& w);
  void Watchdog();
  NcclCommunicator(ncclComm_t comm, int rank, int world, int device, cudaStream_t stream, float* barrier_buffer);

  // "nccl allreduce (tag 3, rank 0 of 4, device 0[, <peers>])".
  std::string Where(const char* op, uint32_t tag, const std::string& peers) const;
  // FailedPrecondition if an earlier failure aborted the communicator;
  // InvalidArgument for a timeout that is not positive.
  absl::Status Begin(const char* op, const CollectiveOptions& options) const;
  // InvalidArgument unless `data` is device (or managed) memory on device_.
  absl::Status CheckDeviceBuffer(const std::string& where, const char* what, const void* data) const;
  // An operation's NCCL call(s) on a stream; returns NCCL's result.
  using Enqueue = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;
  // One checked operation: what it is called in messages, its NCCL call
  // (null: nothing to move, on every rank alike) and its traffic.
  // CUDA work around the NCCL call on the same stream (the 16-bit wire's
  // coding): `before` first; `after` once NCCL has the call in (enqueued:
  // true), or to release what `before` took when `before` failed or NCCL
  // did not take the call (false; after an abort, if one was needed). Their
  // CUDA failures fail the call without aborting the communicator; a call on
  // the stream is waited for (Execute) or watched (EnqueueWatched) all the
  // same. When `before` is set, so is `after`.
  using Before = std::function<absl::Status(cudaStream_t)>;
  using After = std::function<absl::Status(cudaStream_t, bool enqueued)>;
  struct Around {
    Before before;
    After after;
  };
  struct Call {
    std::string where;
    Enqueue enqueue;
    TrafficBytes traffic;
    Before before;
    After after;
  };
  // Sets `call`'s work for an allreduce of `data` with a 16-bit wire (see
  // the file comment).
  void WireCoding(Call& call, absl::Span<float> data, ReduceOp op, bool bfloat16) const;
  // The operations' checks (Begin, sizes, peers, device buffers) and calls;
  // `on` (null: the communicator's own stream) only names the stream.
  absl::StatusOr<Call> AllReduceCall(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options,
                                     cudaStream_t on) const;
  absl::StatusOr<Call> ReduceScatterCall(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                         const CollectiveOptions& options, cudaStream_t on) const;
  absl::StatusOr<Call> AllGatherCall(absl::Span<const float> in, absl::Span<float> out,
                                     const CollectiveOptions& options, cudaStream_t on) const;
  // Send or Recv ("send"/"recv"): one ncclSend or ncclRecv in a group.
  absl::StatusOr<Call> PointToPointCall(const char* op, float* data, size_t size, int peer,
                                        const CollectiveOptions& options, cudaStream_t on) const;
  absl::StatusOr<Call> SendRecvCall(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                    const CollectiveOptions& options, cudaStream_t on) const;
  // InvalidArgument: an Enqueue* call given no stream (null would make
  // Dispatch wait on the communicator's own).
  absl::Status NoStream(const char* call) const;
  // Where(...), with "on the caller's stream" when `on` is given.
  std::string WhereOn(const char* op, uint32_t tag, std::string peers, cudaStream_t on) const;
  // Runs a checked call: on stream_, waiting for it (Execute), when `on` is
  // null; else enqueued on `on` and left to the watchdog (EnqueueWatched).
  // Counts its traffic once it is in.
  absl::Status Dispatch(absl::StatusOr<Call> call, const CollectiveOptions& options, cudaStream_t on);
  // Enqueues the work on stream_ and waits for it until the timeout; aborts
  // the communicator on timeout or on an asynchronous NCCL / CUDA error
  // (see the file comment).
  absl::Status Execute(const std::string& where, const CollectiveOptions& options, const Enqueue& enqueue,
                       const Around& around = {});
  // Enqueues the work on `on` between two events the watchdog follows.
  absl::Status EnqueueWatched(const std::string& where, const CollectiveOptions& options, const Enqueue& enqueue,
                              const Around& around, cudaStream_t on);
  // Under mu_, the device current: refuses an aborted communicator, sets
  // `deadline` from options.timeout and enqueues the work.
  absl::Status EnqueueLocked(const std::string& where, const CollectiveOptions& options,
                             const std::function<ncclResult_t(ncclComm_t)>& enqueue, absl::Time* deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An enqueue NCCL refused: bad arguments leave the communicator usable,
  // anything else aborts it. Returns the error.
  absl::Status EnqueueFailed(const std::string& where, ncclResult_t enqueued, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NCCL's asynchronous error, if any, aborts the communicator; returns it.
  absl::Status CheckAsyncError(const std::string& where) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Aborts comm_ and remembers `status` as the reason; returns it.
  absl::Status Abort(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int rank_;
  const int world_;
  const int device_;
  cudaStream_t stream_;
  float* barrier_buffer_;  // one float of device memory
  TrafficMeter meter_;
  // Serialises the calls (NCCL communicators are not thread-safe) and guards
  // the communicator's state.
  mutable absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);  // null once aborted
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::deque<Watched> watched_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;  // started by the first call enqueued on a caller's stream
};

// Connects rank `rank` of `world` on CUDA device `device`:
//   1. opens the rendezvous store and checks identities exactly as ConnectGloo
//      does (OpenRendezvous in rendezvous.h), each wait bounded by `timeout`;
//   2. rank 0 calls ncclGetUniqueId and publishes it (hex) under the run's
//      key "nccl/unique_id"; the others poll for it up to `timeout`;
//   3. makes `device` current and calls ncclCommInitRankConfig with
//      blocking = 0, polling ncclCommGetAsyncError up to `timeout`: a rank
//      that never joins ends in DeadlineExceeded (the half-built communicator
//      is aborted), not in a hang.
// `identity.world_size` 0 means `world`. No CUDA device (or `device` out of
// range) is FailedPrecondition / InvalidArgument before the rendezvous starts.
// Leaves `device` current on the calling thread.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const RendezvousSpec& spec, int rank, int world,
                                                          int device, const WorkerIdentity& identity,
                                                          absl::Duration timeout);

}  // namespace nereid

#endif  // NEREID_COMM_NCCL_COMMUNICATOR_H_
