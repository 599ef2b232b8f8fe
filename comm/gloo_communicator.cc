#include "comm/gloo_communicator.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/collective_checks.h"
#include "comm/gloo_status.h"
#include "comm/ring_collectives.h"
#include "core/status_macros.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace nereid {
namespace {

// Slot prefixes for the operations written here; Gloo's own algorithms use
// 0x01..0x08 (gloo/types.h).
constexpr uint8_t kReduceScatterSlotPrefix = 0x80;
constexpr uint8_t kSendRecvSlotPrefix = 0x81;
constexpr uint8_t kAllReduce16SlotPrefix = 0x82;
constexpr uint8_t kAllGatherSlotPrefix = 0x83;

constexpr int64_t kBytesPerElement = sizeof(float);

// Gloo's element-wise reduction signature: out = a + b over n floats.
void SumFloats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// waitSend/waitRecv return false when another thread aborted the wait
// (CollectiveOptions.abort); a false must not pass for success.
void Completed(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(absl::StrCat(what, " was aborted"));
}

// A wait the abort signal ended is Cancelled, whatever Gloo made of it.
absl::Status AbortedIfFired(absl::Status status, const CollectiveOptions& options) {
  if (status.ok() || options.abort == nullptr || !options.abort->fired()) return status;
  return absl::CancelledError(absl::StrCat(status.message(), " (this rank is failing)"));
}

}  // namespace

absl::StatusOr<std::chrono::milliseconds> ToGlooTimeout(absl::Duration timeout, const std::string& what) {
  RETURN_IF_ERROR(CheckTimeout(what, timeout));
  timeout = std::min(timeout, absl::Hours(24 * 7));
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}

GlooCommunicator::~GlooCommunicator() = default;

int GlooCommunicator::rank() const { return context_->rank; }
int GlooCommunicator::world() const { return context_->size; }

std::string GlooCommunicator::Where(const char* op, uint32_t tag, const std::string& peers) const {
  std::string where = absl::StrCat(backend(), " ", op, " (tag ", tag, ", rank ", rank(), " of ", world());
  if (!peers.empty()) absl::StrAppend(&where, ", ", peers);
  where += ")";
  return where;
}

std::string GlooCommunicator::RingPeers() const {
  const int n = world();
  return absl::StrCat("ring neighbours ", (rank() + n - 1) % n, " and ", (rank() + 1) % n);
}

absl::StatusOr<std::chrono::milliseconds> GlooCommunicator::Begin(const char* op,
                                                                  const CollectiveOptions& options) const {
  const std::string where = Where(op, options.tag, "");
  RETURN_IF_ERROR(failure_.CheckUsable(where));
  return ToGlooTimeout(options.timeout, where);
}

absl::Status GlooCommunicator::AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("allreduce", options));
  const int n = world();
  if (data.empty() || n == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  if (options.wire != WireType::kFloat32) {
    // Our own ring: Gloo's sends float32 only.
    const std::string where = Where("allreduce", options.tag, RingPeers());
    const RingExchange ring = Ring(kAllReduce16SlotPrefix, options.tag, timeout, where);
    RETURN_IF_ERROR(Finish(RingAllReduce(data, rank(), n, options.wire, ring)));
    if (op == ReduceOp::kAvg) ScaleToAverage(data, n);
    meter_.RecordCall(RingAllReduceTraffic(n, static_cast<int64_t>(data.size()) * WireBytesPerElement(options.wire)));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(CallGloo(Where("allreduce", options.tag, RingPeers()), [&] {
    gloo::AllreduceOptions o(context_);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setOutput(data.data(), data.size());
    o.setReduceFunction(&SumFloats);
    o.setTag(options.tag);
    o.setTimeout(timeout);
    gloo::allreduce(o);
  })));
  if (op == ReduceOp::kAvg) ScaleToAverage(data, n);
  meter_.RecordCall(RingAllReduceTraffic(n, static_cast<int64_t>(data.size()) * kBytesPerElement));
  return absl::OkStatus();
}

RingExchange GlooCommunicator::Ring(uint8_t slot_prefix, uint32_t tag, std::chrono::milliseconds timeout,
                                    const std::string& where) {
  const int n = world(), right = (rank() + 1) % n, left = (rank() + n - 1) % n;
  const gloo::Slot slot = gloo::Slot::build(slot_prefix, tag);
  // Each step's message whole, through two staging buffers reused across steps.
  auto out = std::make_shared<std::vector<uint8_t>>(), in = std::make_shared<std::vector<uint8_t>>();
  return [this, right, left, slot, timeout, where, out, in](const RingStep& step) -> absl::Status {
    out->resize(step.send_bytes);
    in->resize(step.recv_bytes);
    if (step.send_bytes > 0) step.produce(out->data(), 0, step.send_bytes);
    RETURN_IF_ERROR(CallGloo(where, [&] {
      std::unique_ptr<gloo::transport::UnboundBuffer> receiving, sending;
      if (step.recv_bytes > 0) {
        receiving = context_->createUnboundBuffer(in->data(), in->size());
        receiving->recv(left, slot);
      }
      if (step.send_bytes > 0) {
        sending = context_->createUnboundBuffer(out->data(), out->size());
        sending->send(right, slot);
      }
      if (receiving != nullptr) Completed(receiving->waitRecv(timeout), "receive");
      if (sending != nullptr) Completed(sending->waitSend(timeout), "send");
    }));
    if (step.recv_bytes > 0) step.consume(in->data(), 0, step.recv_bytes);
    return absl::OkStatus();
  };
}

absl::Status GlooCommunicator::ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                             const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("reduce_scatter", options));
  const int n = world();
  RETURN_IF_ERROR(CheckReduceScatterSizes(Where("reduce_scatter", options.tag, ""), data.size(), out.size(), n));
  if (CollectedLocally(data, out, n)) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const std::string where = Where("reduce_scatter", options.tag, RingPeers());
  const RingExchange ring = Ring(kReduceScatterSlotPrefix, options.tag, timeout, where);
  RETURN_IF_ERROR(Finish(RingReduceScatter(data, out, rank(), n, ring)));
  if (op == ReduceOp::kAvg) ScaleToAverage(out, n);
  meter_.RecordCall(RingReduceScatterTraffic(n, static_cast<int64_t>(data.size()) * kBytesPerElement));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                         const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("allgather", options));
  const int n = world();
  RETURN_IF_ERROR(CheckAllGatherSizes(Where("allgather", options.tag, ""), in.size(), out.size(), n));
  if (CollectedLocally(in, out, n)) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const std::string where = Where("allgather", options.tag, RingPeers());
  RETURN_IF_ERROR(Finish(RingAllGather(in, out, rank(), n, Ring(kAllGatherSlotPrefix, options.tag, timeout, where))));
  meter_.RecordCall(RingAllGatherTraffic(n, static_cast<int64_t>(out.size()) * kBytesPerElement));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("broadcast", options));
  const int n = world();
  RETURN_IF_ERROR(CheckRoot(Where("broadcast", options.tag, ""), root, n));
  if (data.empty() || n == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(CallGloo(Where("broadcast", options.tag, absl::StrCat("root ", root)), [&] {
    gloo::BroadcastOptions o(context_);
    o.setOutput(data.data(), data.size());
    o.setRoot(root);
    o.setTag(options.tag);
    o.setTimeout(timeout);
    gloo::broadcast(o);
  })));
  meter_.RecordCall(BinomialBroadcastTraffic(n, rank(), root, static_cast<int64_t>(data.size()) * kBytesPerElement));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("send", options));
  RETURN_IF_ERROR(CheckPeer(Where("send", options.tag, ""), peer, rank(), world()));
  if (data.empty()) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const int64_t bytes = static_cast<int64_t>(data.size()) * kBytesPerElement;
  RETURN_IF_ERROR(Finish(AbortedIfFired(CallGloo(Where("send", options.tag, absl::StrCat("peer ", peer)), [&] {
    auto buf = context_->createUnboundBuffer(const_cast<float*>(data.data()), bytes);
    buf->send(peer, gloo::Slot::build(kSendRecvSlotPrefix, options.tag));
    AbortRegistration abort(options.abort, [&buf] { buf->abortWaitSend(); });
    Completed(buf->waitSend(timeout), "send");
  }), options)));
  meter_.RecordCall({bytes, 0});
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("recv", options));
  RETURN_IF_ERROR(CheckPeer(Where("recv", options.tag, ""), peer, rank(), world()));
  if (data.empty()) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const int64_t bytes = static_cast<int64_t>(data.size()) * kBytesPerElement;
  RETURN_IF_ERROR(Finish(AbortedIfFired(CallGloo(Where("recv", options.tag, absl::StrCat("peer ", peer)), [&] {
    auto buf = context_->createUnboundBuffer(data.data(), bytes);
    buf->recv(peer, gloo::Slot::build(kSendRecvSlotPrefix, options.tag));
    AbortRegistration abort(options.abort, [&buf] { buf->abortWaitRecv(); });
    Completed(buf->waitRecv(timeout), "receive");
  }), options)));
  meter_.RecordCall({0, bytes});
  return absl::OkStatus();
}

absl::Status GlooCommunicator::SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                        const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("sendrecv", options));
  const std::string where = Where("sendrecv", options.tag, absl::StrCat("to ", to, ", from ", from));
  RETURN_IF_ERROR(CheckSendRecvPeers(where, to, from, rank(), world()));
  if (to == rank()) {
    RETURN_IF_ERROR(SendRecvToSelf(where, send, recv));
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const int64_t sent = static_cast<int64_t>(send.size()) * kBytesPerElement;
  const int64_t received = static_cast<int64_t>(recv.size()) * kBytesPerElement;
  RETURN_IF_ERROR(Finish(AbortedIfFired(CallGloo(where, [&] {
    const gloo::Slot slot = gloo::Slot::build(kSendRecvSlotPrefix, options.tag);
    std::unique_ptr<gloo::transport::UnboundBuffer> in, out;
    if (received > 0) {
      in = context_->createUnboundBuffer(recv.data(), received);
      in->recv(from, slot);
    }
    if (sent > 0) {
      out = context_->createUnboundBuffer(const_cast<float*>(send.data()), sent);
      out->send(to, slot);
    }
    AbortRegistration abort(options.abort, [&in, &out] {
      if (in != nullptr) in->abortWaitRecv();
      if (out != nullptr) out->abortWaitSend();
    });
    if (in != nullptr) Completed(in->waitRecv(timeout), "receive");
    if (out != nullptr) Completed(out->waitSend(timeout), "send");
  }), options)));
  meter_.RecordCall({sent, received});
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Barrier(const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("barrier", options));
  if (world() == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(CallGloo(Where("barrier", options.tag, "dissemination peers"), [&] {
    gloo::BarrierOptions o(context_);
    o.setTag(options.tag);
    o.setTimeout(timeout);
    gloo::barrier(o);
  })));
  meter_.RecordCall();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGlooFullMesh(gloo::rendezvous::Store& store, int rank,
                                                                  int world, const GlooConnectOptions& options) {
  const std::string where = absl::StrCat("gloo/tcp connect (rank ", rank, " of ", world, ", host ",
                                         options.hostname, ")");
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": need 0 <= rank < world"));
  }
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, ToGlooTimeout(options.connect_timeout, where));
  std::shared_ptr<gloo::transport::Device> device;
  RETURN_IF_ERROR(CallGloo(absl::StrCat(where, ": creating the TCP device"), [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  }));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(timeout);
  RETURN_IF_ERROR(CallGloo(absl::StrCat(where, ": connecting the full mesh"),
                           [&] { context->connectFullMesh(store, device); }));
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(context)));
}

}  // namespace nereid
