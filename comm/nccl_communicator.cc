#include "comm/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/collective_checks.h"
#include "comm/rendezvous.h"
#include "comm/wire_format_gpu.h"
#include "core/status_macros.h"

// Non-blocking communicators (ncclConfig_t.blocking), ncclGetLastError and
// ncclAvg. The toolkit on the build machines has 2.28.
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the NCCL backend needs NCCL >= 2.14 (non-blocking communicators)"
#endif

namespace nereid {
namespace {

constexpr int64_t kBytesPerElement = sizeof(float);
constexpr char kUniqueIdKey[] = "nccl/unique_id";
// How long the destructor waits for ncclCommFinalize before aborting.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(5);
// Longest timeout honoured (as in the Gloo backend).
constexpr absl::Duration kMaxTimeout = absl::Hours(24 * 7);

std::string NcclText(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') absl::StrAppend(&text, " (", last, ")");
  return text;
}

absl::StatusCode NcclCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    default:  // ncclUnhandledCudaError, ncclInternalError, ...
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclError(const std::string& where, const char* call, ncclResult_t result, ncclComm_t comm) {
  return absl::Status(NcclCode(result), absl::StrCat(where, ": ", call, ": NCCL error ", static_cast<int>(result),
                                                     ": ", NcclText(result, comm)));
}

absl::Status CudaError(const std::string& where, const char* call, cudaError_t error) {
  return absl::InternalError(absl::StrCat(where, ": ", call, ": CUDA error ", static_cast<int>(error), " (",
                                          cudaGetErrorName(error), "): ", cudaGetErrorString(error)));
}

// Polls with a short spin first (most collectives finish in microseconds),
// then sleeps growing to 1 ms.
class Backoff {
 public:
  void Wait() {
    if (++polls_ <= 64) {
      std::this_thread::yield();
    } else {
      sleep_ = std::min(absl::Milliseconds(1), sleep_ * 2);
      absl::SleepFor(sleep_);
    }
  }

 private:
  int polls_ = 0;
  absl::Duration sleep_ = absl::Microseconds(5);
};

// Makes `device` current for the scope, then restores the previous device.
class DeviceScope {
 public:
  absl::Status Enter(const std::string& where, int device) {
    cudaError_t error = cudaGetDevice(&previous_);
    if (error != cudaSuccess) return CudaError(where, "cudaGetDevice", error);
    if (previous_ == device) return absl::OkStatus();
    error = cudaSetDevice(device);
    if (error != cudaSuccess) return CudaError(where, absl::StrCat("cudaSetDevice(", device, ")").c_str(), error);
    restore_ = true;
    return absl::OkStatus();
  }
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// Waits until the non-blocking `comm` leaves ncclInProgress, up to `timeout`.
// Returns the final state (ncclInProgress if the time ran out) or the error
// of ncclCommGetAsyncError itself.
ncclResult_t WaitWhileInProgress(ncclComm_t comm, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm, &state);
    if (result != ncclSuccess) return result;
    if (state != ncclInProgress) return state;
    if (absl::Now() >= deadline) return ncclInProgress;
    backoff.Wait();
  }
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }


std::string FormatMillis(absl::Duration d) { return absl::StrCat(absl::ToInt64Milliseconds(d), "ms"); }

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(ncclComm_t comm, int device) {
  const std::string where = absl::StrCat("nccl communicator on device ", device);
  if (comm == nullptr) return absl::InvalidArgumentError(absl::StrCat(where, ": null ncclComm_t"));
  // Abort `comm` on every failure below: we own it.
  auto fail = [comm](absl::Status status) {
    (void)ncclCommAbort(comm);
    return status;
  };
  int rank = -1;
  int world = 0;
  ncclResult_t result = ncclCommUserRank(comm, &rank);
  if (result != ncclSuccess) return fail(NcclError(where, "ncclCommUserRank", result, comm));
  result = ncclCommCount(comm, &world);
  if (result != ncclSuccess) return fail(NcclError(where, "ncclCommCount", result, comm));
  int comm_device = -1;
  result = ncclCommCuDevice(comm, &comm_device);
  if (result != ncclSuccess) return fail(NcclError(where, "ncclCommCuDevice", result, comm));
  if (comm_device != device) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(where, ": the NCCL communicator belongs to device ", comm_device)));
  }
  DeviceScope scope;
  absl::Status status = scope.Enter(where, device);
  if (!status.ok()) return fail(status);
  cudaStream_t stream = nullptr;
  cudaError_t error = cudaStreamCreate(&stream);
  if (error != cudaSuccess) return fail(CudaError(where, "cudaStreamCreate", error));
  void* barrier = nullptr;
  error = cudaMalloc(&barrier, sizeof(float));
  if (error == cudaSuccess) error = cudaMemset(barrier, 0, sizeof(float));
  if (error != cudaSuccess) {
    if (barrier != nullptr) (void)cudaFree(barrier);
    (void)cudaStreamDestroy(stream);
    return fail(CudaError(where, "allocating the barrier buffer", error));
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, rank, world, device, stream, static_cast<float*>(barrier)));
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int rank, int world, int device, cudaStream_t stream,
                                   float* barrier_buffer)
    : rank_(rank), world_(world), device_(device), stream_(stream), barrier_buffer_(barrier_buffer), comm_(comm) {}

NcclCommunicator::~NcclCommunicator() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  absl::MutexLock lock(&mu_);
  DeviceScope scope;
  (void)scope.Enter("~NcclCommunicator", device_);
  if (comm_ != nullptr) {
    // Finalize needs the peers to quiesce too; a peer that is gone must not
    // hang us, so wait a bounded time and abort otherwise.
    ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclSuccess || result == ncclInProgress) result = WaitWhileInProgress(comm_, kFinalizeTimeout);
    if (result == ncclSuccess) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  for (Watched& w : watched_) DestroyEvents(w);  // the work ended with the communicator
  if (barrier_buffer_ != nullptr) (void)cudaFree(barrier_buffer_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::Where(const char* op, uint32_t tag, const std::string& peers) const {
  std::string where =
      absl::StrCat(backend(), " ", op, " (tag ", tag, ", rank ", rank_, " of ", world_, ", device ", device_);
  if (!peers.empty()) absl::StrAppend(&where, ", ", peers);
  where += ")";
  return where;
}

absl::Status NcclCommunicator::Begin(const char* op, const CollectiveOptions& options) const {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(Where(op, options.tag, ""),
                                                        ": communicator unusable after an earlier failure: ",
                                                        broken_.message()));
    }
  }
  return CheckTimeout(Where(op, options.tag, ""), options.timeout);
}

absl::Status NcclCommunicator::CheckDeviceBuffer(const std::string& where, const char* what,
                                                 const void* data) const {
  cudaPointerAttributes attributes;
  std::memset(&attributes, 0, sizeof(attributes));
  const cudaError_t error = cudaPointerGetAttributes(&attributes, data);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but do not leave it for others
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " is not CUDA memory: ",
                                                   cudaGetErrorString(error)));
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", what, " is host memory; the NCCL backend needs device buffers (cudaMalloc) on device ",
        device_));
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " lives on device ", attributes.device,
                                                   ", the communicator on device ", device_));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Abort(absl::Status status) {
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (broken_.ok()) broken_ = status;
  return status;
}

absl::Status NcclCommunicator::Execute(const std::string& where, const CollectiveOptions& options,
                                       const Enqueue& enqueue, const Around& around) {
  absl::MutexLock lock(&mu_);
  DeviceScope scope;
  RETURN_IF_ERROR(scope.Enter(where, device_));
  const absl::Duration timeout = std::min(options.timeout, kMaxTimeout);
  absl::Time deadline;
  if (around.before) {
    if (absl::Status before = around.before(stream_); !before.ok()) {
      if (around.after) (void)around.after(stream_, false);  // releases what `before` took
      return before;
    }
  }
  absl::Status enqueued =
      EnqueueLocked(where, options, [&](ncclComm_t comm) { return enqueue(comm, stream_); }, &deadline);
  // A failure of the work after NCCL's call: reported once the stream is done.
  absl::Status after_failed;
  if (around.after) {
    if (!enqueued.ok()) {
      (void)around.after(stream_, false);
      return enqueued;
    }
    // Behind NCCL's call only once NCCL has it in (a non-blocking
    // communicator takes no other stream work before); an abort first stops
    // what NCCL may have put on the stream, then the release goes behind it.
    if (const ncclResult_t state = WaitWhileInProgress(comm_, deadline - absl::Now()); state != ncclSuccess) {
      absl::Status failed = Abort(NcclError(where, "completing the enqueue", state, comm_));
      (void)around.after(stream_, false);
      return failed;
    }
    after_failed = around.after(stream_, true);
  }
  RETURN_IF_ERROR(enqueued);

  // Done when NCCL has finished enqueueing (state ncclSuccess, not
  // ncclInProgress) and the stream has run the work.
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) return Abort(NcclError(where, "ncclCommGetAsyncError", result, comm_));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Abort(NcclError(where, "asynchronous error", state, comm_));
    }
    if (state == ncclSuccess) {
      const cudaError_t error = cudaStreamQuery(stream_);
      if (error == cudaSuccess) return after_failed;
      if (error != cudaErrorNotReady) return Abort(CudaError(where, "cudaStreamQuery", error));
    }
    if (absl::Now() >= deadline) {
      return Abort(absl::DeadlineExceededError(absl::StrCat(
          where, ": not complete after ", FormatMillis(timeout),
          " (a peer did not make the matching call, or is stopped or dead); the NCCL communicator was aborted")));
    }
    backoff.Wait();
  }
}

absl::Status NcclCommunicator::EnqueueLocked(const std::string& where, const CollectiveOptions& options,
                                             const std::function<ncclResult_t(ncclComm_t)>& enqueue,
                                             absl::Time* deadline) {
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": communicator unusable after an earlier failure: ", broken_.message()));
  }
  *deadline = absl::Now() + std::min(options.timeout, kMaxTimeout);
  const ncclResult_t enqueued = enqueue(comm_);
  if (enqueued != ncclSuccess && enqueued != ncclInProgress) return EnqueueFailed(where, enqueued, *deadline);
  return absl::OkStatus();
}

absl::Status NcclCommunicator::EnqueueFailed(const std::string& where, ncclResult_t enqueued, absl::Time deadline) {
  const absl::Status status = NcclError(where, "enqueueing", enqueued, comm_);
  // Bad arguments are refused before anything runs; the communicator stays
  // usable unless NCCL reports it broken.
  ncclResult_t state = ncclSuccess;
  const bool healthy = ncclCommGetAsyncError(comm_, &state) == ncclSuccess &&
                       (state == ncclSuccess || state == ncclInProgress);
  if (healthy && (enqueued == ncclInvalidArgument || enqueued == ncclInvalidUsage)) {
    // A non-blocking communicator may still be completing the refusal.
    if (state == ncclInProgress && WaitWhileInProgress(comm_, deadline - absl::Now()) != ncclSuccess) {
      return Abort(status);
    }
    return status;
  }
  return Abort(status);
}

absl::Status NcclCommunicator::EnqueueWatched(const std::string& where, const CollectiveOptions& options,
                                              const Enqueue& enqueue, const Around& around, cudaStream_t on) {
  absl::MutexLock lock(&mu_);
  DeviceScope scope;
  RETURN_IF_ERROR(scope.Enter(where, device_));
  Watched watched;
  watched.timeout = std::min(options.timeout, kMaxTimeout);
  watched.where = where;
  cudaError_t error = cudaEventCreateWithFlags(&watched.started, cudaEventDisableTiming);
  if (error == cudaSuccess) error = cudaEventRecord(watched.started, on);
  if (error != cudaSuccess) {
    DestroyEvents(watched);
    return Abort(CudaError(where, "recording the call's start", error));
  }
  absl::Time deadline;
  if (around.before) {
    if (absl::Status before = around.before(on); !before.ok()) {
      if (around.after) (void)around.after(on, false);  // releases what `before` took
      DestroyEvents(watched);
      return before;
    }
  }
  absl::Status enqueued =
      EnqueueLocked(where, options, [&](ncclComm_t comm) { return enqueue(comm, on); }, &deadline);
  if (!enqueued.ok()) {
    if (around.after) (void)around.after(on, false);
    DestroyEvents(watched);
    return enqueued;
  }
  // A non-blocking communicator takes no further call until this one is in.
  const ncclResult_t state = WaitWhileInProgress(comm_, deadline - absl::Now());
  if (state != ncclSuccess) {
    // The abort first stops what NCCL may have put on the stream; the
    // release goes behind it.
    absl::Status failed = Abort(NcclError(where, "completing the enqueue", state, comm_));
    if (around.after) (void)around.after(on, false);
    DestroyEvents(watched);
    return failed;
  }
  // A CUDA failure of the work after NCCL's call fails the step (the
  // communicator is fine); the call is watched all the same, since it is on
  // the stream.
  const absl::Status after_failed = around.after ? around.after(on, true) : absl::OkStatus();
  error = cudaEventCreateWithFlags(&watched.done, cudaEventDisableTiming);
  if (error == cudaSuccess) error = cudaEventRecord(watched.done, on);
  if (error != cudaSuccess) {
    DestroyEvents(watched);
    return Abort(CudaError(where, "recording the call's end", error));
  }
  watched_.push_back(std::move(watched));
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watchdog(); });
  return after_failed;
}

absl::Status NcclCommunicator::Dispatch(absl::StatusOr<Call> call, const CollectiveOptions& options,
                                        cudaStream_t on) {
  if (!call.ok()) return call.status();
  if (call->enqueue == nullptr) {  // nothing to move, on every rank alike
    meter_.RecordCall();
    return absl::OkStatus();
  }
  if (on == nullptr) {
    RETURN_IF_ERROR(Execute(call->where, options, call->enqueue, Around{call->before, call->after}));
  } else {
    RETURN_IF_ERROR(EnqueueWatched(call->where, options, call->enqueue, Around{call->before, call->after}, on));
  }
  meter_.RecordCall(call->traffic);
  return absl::OkStatus();
}

std::string NcclCommunicator::WhereOn(const char* op, uint32_t tag, std::string peers, cudaStream_t on) const {
  if (on != nullptr) peers = peers.empty() ? "on the caller's stream" : absl::StrCat(peers, ", on the caller's stream");
  return Where(op, tag, peers);
}

void NcclCommunicator::WireCoding(Call& call, absl::Span<float> data, ReduceOp op, bool bfloat16) const {
  // The codes: stream-ordered memory, freed behind the decode (or behind the
  // encode when NCCL refused the call).
  struct Codes {
    uint16_t* codes = nullptr;
  };
  auto codes = std::make_shared<Codes>();
  const int64_t n = static_cast<int64_t>(data.size());
  const std::string where = call.where;
  call.before = [codes, data, n, bfloat16, where](cudaStream_t on) -> absl::Status {
    void* p = nullptr;
    cudaError_t error = cudaMallocAsync(&p, static_cast<size_t>(n) * sizeof(uint16_t), on);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaError(where, "cudaMallocAsync (the 16-bit codes)", error);
    }
    codes->codes = static_cast<uint16_t*>(p);
    error = static_cast<cudaError_t>(wire_gpu::Encode(bfloat16, data.data(), codes->codes, n, on));
    return error == cudaSuccess ? absl::OkStatus() : CudaError(where, "encoding the 16-bit wire", error);
  };
  call.enqueue = [codes, n, bfloat16](ncclComm_t comm, cudaStream_t on) {
    return ncclAllReduce(codes->codes, codes->codes, static_cast<size_t>(n), bfloat16 ? ncclBfloat16 : ncclFloat16,
                         ncclSum, comm, on);
  };
  const float scale = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(world_) : 1.0f;
  call.after = [codes, data, n, bfloat16, scale, where](cudaStream_t on, bool enqueued) -> absl::Status {
    cudaError_t error = cudaSuccess;
    if (enqueued) error = static_cast<cudaError_t>(wire_gpu::Decode(bfloat16, codes->codes, data.data(), scale, n, on));
    const cudaError_t freed = codes->codes == nullptr ? cudaSuccess : cudaFreeAsync(codes->codes, on);
    codes->codes = nullptr;
    if (error != cudaSuccess) return CudaError(where, "decoding the 16-bit wire", error);
    return freed == cudaSuccess ? absl::OkStatus() : CudaError(where, "cudaFreeAsync (the 16-bit codes)", freed);
  };
}

absl::StatusOr<NcclCommunicator::Call> NcclCommunicator::AllReduceCall(absl::Span<float> data, ReduceOp op,
                                                                       const CollectiveOptions& options,
                                                                       cudaStream_t on) const {
  RETURN_IF_ERROR(Begin("allreduce", options));
  Call call{WhereOn("allreduce", options.tag, "", on)};
  if (data.empty()) return call;
  RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "data", data.data()));
  call.traffic =
      RingAllReduceTraffic(world_, static_cast<int64_t>(data.size()) * WireBytesPerElement(options.wire));
  if (options.wire != WireType::kFloat32) {
    WireCoding(call, data, op, options.wire == WireType::kBFloat16);
    return call;
  }
  call.enqueue = [data, op](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, NcclOp(op), comm, stream);
  };
  return call;
}

absl::StatusOr<NcclCommunicator::Call> NcclCommunicator::ReduceScatterCall(absl::Span<const float> data,
                                                                           absl::Span<float> out, ReduceOp op,
                                                                           const CollectiveOptions& options,
                                                                           cudaStream_t on) const {
  RETURN_IF_ERROR(Begin("reduce_scatter", options));
  Call call{WhereOn("reduce_scatter", options.tag, "", on)};
  RETURN_IF_ERROR(CheckReduceScatterSizes(call.where, data.size(), out.size(), world_));
  if (out.empty()) return call;
  RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "input", data.data()));
  RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "output", out.data()));
  call.enqueue = [data, out, op](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(data.data(), out.data(), out.size(), ncclFloat32, NcclOp(op), comm, stream);
  };
  call.traffic = RingReduceScatterTraffic(world_, static_cast<int64_t>(data.size()) * kBytesPerElement);
  return call;
}

absl::StatusOr<NcclCommunicator::Call> NcclCommunicator::AllGatherCall(absl::Span<const float> in,
                                                                       absl::Span<float> out,
                                                                       const CollectiveOptions& options,
                                                                       cudaStream_t on) const {
  RETURN_IF_ERROR(Begin("allgather", options));
  Call call{WhereOn("allgather", options.tag, "", on)};
  RETURN_IF_ERROR(CheckAllGatherSizes(call.where, in.size(), out.size(), world_));
  if (in.empty()) return call;
  RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "input", in.data()));
  RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "output", out.data()));
  call.enqueue = [in, out](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(in.data(), out.data(), in.size(), ncclFloat32, comm, stream);
  };
  call.traffic = RingAllGatherTraffic(world_, static_cast<int64_t>(out.size()) * kBytesPerElement);
  return call;
}

absl::StatusOr<NcclCommunicator::Call> NcclCommunicator::SendRecvCall(absl::Span<const float> send, int to,
                                                                      absl::Span<float> recv, int from,
                                                                      const CollectiveOptions& options,
                                                                      cudaStream_t on) const {
  RETURN_IF_ERROR(Begin("sendrecv", options));
  Call call{WhereOn("sendrecv", options.tag, absl::StrCat("to ", to, ", from ", from), on)};
  RETURN_IF_ERROR(CheckSendRecvPeers(call.where, to, from, rank_, world_));
  if (to == rank_) {  // and from == rank_: a copy, which this backend does not make
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": ranks ", to, " and ", from, " must be other ranks of world ", world_));
  }
  if (send.empty() && recv.empty()) return call;
  if (!send.empty()) RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "send", send.data()));
  if (!recv.empty()) RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "recv", recv.data()));
  call.enqueue = [send, to, recv, from](ncclComm_t comm, cudaStream_t stream) {
    // ncclGroupEnd is called whatever the transfers returned; the first error wins.
    ncclResult_t result = ncclGroupStart();
    if (result != ncclSuccess) return result;
    ncclResult_t moved = ncclSuccess;
    if (!send.empty()) moved = ncclSend(send.data(), send.size(), ncclFloat32, to, comm, stream);
    if (moved == ncclSuccess && !recv.empty()) moved = ncclRecv(recv.data(), recv.size(), ncclFloat32, from, comm, stream);
    result = ncclGroupEnd();
    return moved != ncclSuccess ? moved : result;
  };
  call.traffic = {static_cast<int64_t>(send.size()) * kBytesPerElement,
                  static_cast<int64_t>(recv.size()) * kBytesPerElement};
  return call;
}

absl::Status NcclCommunicator::NoStream(const char* call) const {
  return absl::InvalidArgumentError(absl::StrCat("nccl ", call, " (rank ", rank_, " of ", world_,
                                                 "): needs the caller's stream, not the default (null) one"));
}

absl::Status NcclCommunicator::EnqueueAllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options,
                                                void* stream) {
  cudaStream_t on = static_cast<cudaStream_t>(stream);
  if (on == nullptr) return NoStream("EnqueueAllReduce");
  return Dispatch(AllReduceCall(data, op, options, on), options, on);
}

absl::Status NcclCommunicator::EnqueueReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                                    const CollectiveOptions& options, void* stream) {
  cudaStream_t on = static_cast<cudaStream_t>(stream);
  if (on == nullptr) return NoStream("EnqueueReduceScatter");
  return Dispatch(ReduceScatterCall(data, out, op, options, on), options, on);
}

absl::Status NcclCommunicator::EnqueueAllGather(absl::Span<const float> in, absl::Span<float> out,
                                                const CollectiveOptions& options, void* stream) {
  cudaStream_t on = static_cast<cudaStream_t>(stream);
  if (on == nullptr) return NoStream("EnqueueAllGather");
  return Dispatch(AllGatherCall(in, out, options, on), options, on);
}

absl::Status NcclCommunicator::EnqueueSendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                               const CollectiveOptions& options, void* stream) {
  cudaStream_t on = static_cast<cudaStream_t>(stream);
  if (on == nullptr) return NoStream("EnqueueSendRecv");
  return Dispatch(SendRecvCall(send, to, recv, from, options, on), options, on);
}

absl::Status NcclCommunicator::DeferredFailure() {
  absl::MutexLock lock(&mu_);
  (void)CheckAsyncError("nccl (after the step)");
  return broken_;
}

absl::Status NcclCommunicator::CheckAsyncError(const std::string& where) {
  if (comm_ == nullptr) return absl::OkStatus();
  ncclResult_t state = ncclSuccess;
  const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
  if (result != ncclSuccess) return Abort(NcclError(where, "ncclCommGetAsyncError", result, comm_));
  if (state != ncclSuccess && state != ncclInProgress) return Abort(NcclError(where, "asynchronous error", state, comm_));
  return absl::OkStatus();
}

void NcclCommunicator::DestroyEvents(Watched& w) {
  if (w.started != nullptr) (void)cudaEventDestroy(w.started);
  if (w.done != nullptr) (void)cudaEventDestroy(w.done);
  w.started = w.done = nullptr;
}

void NcclCommunicator::Watchdog() {
  DeviceScope scope;
  (void)scope.Enter("nccl watchdog", device_);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      // The work completes in enqueue order; the front is the one to watch.
      while (!watched_.empty()) {
        Watched& front = watched_.front();
        // NCCL's error first: one raised as the work ends must not be missed.
        if (!CheckAsyncError(front.where).ok()) continue;  // aborted: the events complete
        if (front.started != nullptr) {
          const cudaError_t reached = cudaEventQuery(front.started);
          if (reached == cudaSuccess) {
            (void)cudaEventDestroy(front.started);
            front.started = nullptr;
            front.deadline = absl::Now() + front.timeout;  // the stream reached the call
          } else if (reached != cudaErrorNotReady) {
            (void)Abort(CudaError(front.where, "cudaEventQuery", reached));
            break;
          }
        }
        const cudaError_t error = cudaEventQuery(front.done);
        if (error == cudaSuccess) {
          DestroyEvents(front);
          watched_.pop_front();
          continue;
        }
        if (error != cudaErrorNotReady) {
          (void)Abort(CudaError(front.where, "cudaEventQuery", error));
        } else if (comm_ != nullptr) {
          if (absl::Now() >= front.deadline) {
            (void)Abort(absl::DeadlineExceededError(absl::StrCat(
                front.where, ": not complete by its deadline (a peer did not make the matching call, or is stopped "
                             "or dead); the NCCL communicator was aborted")));
          }
        }
        break;
      }
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status NcclCommunicator::AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) {
  return Dispatch(AllReduceCall(data, op, options, nullptr), options, nullptr);
}

absl::Status NcclCommunicator::ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                             const CollectiveOptions& options) {
  return Dispatch(ReduceScatterCall(data, out, op, options, nullptr), options, nullptr);
}

absl::Status NcclCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                         const CollectiveOptions& options) {
  return Dispatch(AllGatherCall(in, out, options, nullptr), options, nullptr);
}

absl::Status NcclCommunicator::Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) {
  RETURN_IF_ERROR(Begin("broadcast", options));
  const std::string where = Where("broadcast", options.tag, absl::StrCat("root ", root));
  RETURN_IF_ERROR(CheckRoot(where, root, world_));
  if (data.empty()) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckDeviceBuffer(where, "data", data.data()));
  RETURN_IF_ERROR(Execute(where, options, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat32, root, comm, stream);
  }));
  meter_.RecordCall(
      BinomialBroadcastTraffic(world_, rank_, root, static_cast<int64_t>(data.size()) * kBytesPerElement));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) {
  return Dispatch(PointToPointCall("send", const_cast<float*>(data.data()), data.size(), peer, options, nullptr),
                  options, nullptr);
}

absl::Status NcclCommunicator::Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) {
  return Dispatch(PointToPointCall("recv", data.data(), data.size(), peer, options, nullptr), options, nullptr);
}

absl::Status NcclCommunicator::SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                        const CollectiveOptions& options) {
  return Dispatch(SendRecvCall(send, to, recv, from, options, nullptr), options, nullptr);
}

absl::StatusOr<NcclCommunicator::Call> NcclCommunicator::PointToPointCall(const char* op, float* data, size_t size,
                                                                          int peer, const CollectiveOptions& options,
                                                                          cudaStream_t on) const {
  const bool send = std::string(op) == "send";
  RETURN_IF_ERROR(Begin(op, options));
  Call call{WhereOn(op, options.tag, absl::StrCat("peer ", peer), on)};
  RETURN_IF_ERROR(CheckPeer(call.where, peer, rank_, world_));
  if (size == 0) return call;
  RETURN_IF_ERROR(CheckDeviceBuffer(call.where, "data", data));
  call.enqueue = [send, data, size, peer](ncclComm_t comm, cudaStream_t stream) {
    // ncclGroupEnd is called whatever the transfer returned; the first error wins.
    ncclResult_t result = ncclGroupStart();
    if (result != ncclSuccess) return result;
    const ncclResult_t moved = send ? ncclSend(data, size, ncclFloat32, peer, comm, stream)
                                    : ncclRecv(data, size, ncclFloat32, peer, comm, stream);
    result = ncclGroupEnd();
    return moved != ncclSuccess ? moved : result;
  };
  const int64_t bytes = static_cast<int64_t>(size) * kBytesPerElement;
  call.traffic = send ? TrafficBytes{bytes, 0} : TrafficBytes{0, bytes};
  return call;
}

absl::Status NcclCommunicator::EnqueueSend(absl::Span<const float> data, int peer, const CollectiveOptions& options,
                                           void* stream) {
  cudaStream_t on = static_cast<cudaStream_t>(stream);
  if (on == nullptr) return NoStream("EnqueueSend");
  return Dispatch(PointToPointCall("send", const_cast<float*>(data.data()), data.size(), peer, options, on), options,
                  on);
}

absl::Status NcclCommunicator::EnqueueRecv(absl::Span<float> data, int peer, const CollectiveOptions& options,
                                           void* stream) {
  cudaStream_t on = static_cast<cudaStream_t>(stream);
  if (on == nullptr) return NoStream("EnqueueRecv");
  return Dispatch(PointToPointCall("recv", data.data(), data.size(), peer, options, on), options, on);
}

absl::Status NcclCommunicator::Barrier(const CollectiveOptions& options) {
  RETURN_IF_ERROR(Begin("barrier", options));
  RETURN_IF_ERROR(Execute(Where("barrier", options.tag, "allreduce of one float"), options, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm, stream);
  }));
  meter_.RecordCall();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const RendezvousSpec& spec, int rank, int world,
                                                          int device, const WorkerIdentity& identity,
                                                          absl::Duration timeout) {
  const std::string where = absl::StrCat("ConnectNccl(", spec.ToString(), " (run '", spec.run_id, "'), rank ",
                                         rank, " of ", world, ", device ", device, ")");
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": need world >= 1 and 0 <= rank < world"));
  }
  if (device < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": device must be >= 0"));
  RETURN_IF_ERROR(CheckTimeout(where, timeout));
  timeout = std::min(timeout, kMaxTimeout);

  // The device first, so that a rank without one fails at once and clearly.
  int devices = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  if (count_error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": no usable CUDA device: cudaGetDeviceCount: ",
                                                      cudaGetErrorString(count_error)));
  }
  if (devices == 0) return absl::FailedPreconditionError(absl::StrCat(where, ": no CUDA device present"));
  if (device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": device ", device, " does not exist (", devices, " CUDA devices present)"));
  }

  ASSIGN_OR_RETURN(std::unique_ptr<RendezvousStore> store, OpenRendezvous(spec, rank, world, identity, timeout));

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) return NcclError(where, "ncclGetUniqueId", result, nullptr);
    RETURN_IF_ERROR(
        store->Set(kUniqueIdKey, absl::BytesToHexString(absl::string_view(id.internal, sizeof(id.internal)))));
  } else {
    absl::StatusOr<std::string> hex = store->WaitAndGet(kUniqueIdKey, timeout);
    if (!hex.ok()) {
      return absl::Status(hex.status().code(),
                          absl::StrCat(where, ": waiting for rank 0's NCCL unique id: ", hex.status().message()));
    }
    const bool well_formed = hex->size() == 2 * sizeof(id.internal) &&
                             std::all_of(hex->begin(), hex->end(), [](char c) { return absl::ascii_isxdigit(c); });
    if (!well_formed) {
      return absl::InternalError(absl::StrCat(where, ": malformed NCCL unique id in ", store->name(), ": '",
                                              *hex, "'"));
    }
    const std::string bytes = absl::HexStringToBytes(*hex);
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  const cudaError_t set_error = cudaSetDevice(device);
  if (set_error != cudaSuccess) return CudaError(where, absl::StrCat("cudaSetDevice(", device, ")").c_str(), set_error);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that init (and every call) can time out
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  if (result == ncclSuccess || result == ncclInProgress) {
    result = comm == nullptr ? ncclInternalError : WaitWhileInProgress(comm, timeout);
  }
  if (result != ncclSuccess) {
    absl::Status status =
        result == ncclInProgress
            ? absl::DeadlineExceededError(absl::StrCat(
                  where, ": ncclCommInitRankConfig: not all ", world, " ranks joined within ", FormatMillis(timeout),
                  " (rendezvous store ", store->name(), "); the half-built communicator was aborted"))
            : NcclError(where, "ncclCommInitRankConfig", result, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return status;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> communicator, NcclCommunicator::Create(comm, device));
  return std::unique_ptr<Communicator>(std::move(communicator));
}

}  // namespace nereid
