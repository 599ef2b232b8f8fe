#include "comm/gloo_communicator.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/collective_checks.h"
#include "comm/gloo_status.h"
#include "core/status_macros.h"
#include "gloo/allgather.h"
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

constexpr int64_t kBytesPerElement = sizeof(float);

// Gloo's element-wise reduction signature: out = a + b over n floats.
void SumFloats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void Scale(absl::Span<float> data, int world) {
  const float scale = 1.0f / static_cast<float>(world);
  for (float& x : data) x *= scale;
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
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": timeout must be positive, got ", absl::FormatDuration(timeout)));
  }
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(Where(op, options.tag, ""),
                                                        ": communicator unusable after an earlier failure: ",
                                                        broken_.message()));
    }
  }
  return ToGlooTimeout(options.timeout, Where(op, options.tag, ""));
}

absl::Status GlooCommunicator::Finish(absl::Status status) {
  if (status.code() == absl::StatusCode::kDeadlineExceeded || status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kCancelled) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = status;
  }
  return status;
}

absl::Status GlooCommunicator::AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("allreduce", options));
  const int n = world();
  if (data.empty() || n == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  if (options.wire != WireType::kFloat32) return RingAllReduce16(data, op, options, timeout);
  RETURN_IF_ERROR(Finish(CallGloo(Where("allreduce", options.tag, RingPeers()), [&] {
    gloo::AllreduceOptions o(context_);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setOutput(data.data(), data.size());
    o.setReduceFunction(&SumFloats);
    o.setTag(options.tag);
    o.setTimeout(timeout);
    gloo::allreduce(o);
  })));
  if (op == ReduceOp::kAvg) Scale(data, n);
  meter_.RecordCall(RingAllReduceTraffic(n, static_cast<int64_t>(data.size()) * kBytesPerElement));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::RingAllReduce16(absl::Span<float> data, ReduceOp op,
                                               const CollectiveOptions& options, std::chrono::milliseconds timeout) {
  const int n = world();
  const int r = rank();
  const WireType wire = options.wire;
  // Chunk c is [begin(c), begin(c + 1)); sizes differ by at most one.
  const size_t total = data.size();
  auto begin = [&](int c) { return total * static_cast<size_t>(c) / static_cast<size_t>(n); };
  auto chunk = [&](int c) { return absl::MakeSpan(data.data() + begin(c), begin(c + 1) - begin(c)); };
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  std::vector<uint16_t> staging(total);
  const std::string where = Where("allreduce", options.tag, RingPeers());
  RETURN_IF_ERROR(Finish(CallGloo(where, [&] {
    auto buf = context_->createUnboundBuffer(staging.data(), total * sizeof(uint16_t));
    const uint64_t slot = gloo::Slot::build(kAllReduce16SlotPrefix, options.tag);
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    // One ring step: send chunk `out` (already encoded in staging) right,
    // receive chunk `in` from the left into staging. Empty chunks are skipped
    // on both sides alike (every rank knows every chunk's size).
    auto exchange = [&](int out, int in) {
      const size_t in_bytes = chunk(in).size() * sizeof(uint16_t);
      const size_t out_bytes = chunk(out).size() * sizeof(uint16_t);
      if (in_bytes > 0) buf->recv(left, slot, begin(in) * sizeof(uint16_t), in_bytes);
      if (out_bytes > 0) buf->send(right, slot, begin(out) * sizeof(uint16_t), out_bytes);
      if (in_bytes > 0) Completed(buf->waitRecv(timeout), "receive");
      if (out_bytes > 0) Completed(buf->waitSend(timeout), "send");
    };
    // Reduce-scatter: at step s send the partial sum of chunk r-s, add the
    // left neighbour's partial sum of chunk r-s-1. Rank r ends owning chunk
    // r+1 with all n terms.
    for (int s = 0; s < n - 1; ++s) {
      const int out = mod(r - s), in = mod(r - s - 1);
      EncodeWire(wire, chunk(out), staging.data() + begin(out));
      exchange(out, in);
      DecodeWireAdd(wire, staging.data() + begin(in), chunk(in));
    }
    // The owner rounds its chunk once, as everyone else will receive it.
    const int owned = mod(r + 1);
    EncodeWire(wire, chunk(owned), staging.data() + begin(owned));
    DecodeWire(wire, staging.data() + begin(owned), chunk(owned));
    // Allgather: pass the rounded chunks around the ring unchanged.
    for (int s = 0; s < n - 1; ++s) {
      const int out = mod(r + 1 - s), in = mod(r - s);
      exchange(out, in);
      DecodeWire(wire, staging.data() + begin(in), chunk(in));
    }
  })));
  if (op == ReduceOp::kAvg) Scale(data, n);
  meter_.RecordCall(RingAllReduceTraffic(n, static_cast<int64_t>(total) * WireBytesPerElement(wire)));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                             const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("reduce_scatter", options));
  const int n = world();
  const int r = rank();
  const size_t chunk = out.size();
  RETURN_IF_ERROR(CheckReduceScatterSizes(Where("reduce_scatter", options.tag, ""), data.size(), chunk, n));
  if (chunk == 0) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  if (n == 1) {
    std::copy(data.begin(), data.end(), out.begin());
    meter_.RecordCall();
    return absl::OkStatus();
  }
  // acc starts as this rank's input; at step s this rank sends its partial
  // sum of chunk (r-s-1) to the right and adds the left neighbour's partial
  // sum of chunk (r-s-2) into acc. After n-1 steps chunk r holds all n terms.
  std::vector<float> acc(data.begin(), data.end());
  std::vector<float> incoming(chunk);
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  const size_t chunk_bytes = chunk * sizeof(float);
  RETURN_IF_ERROR(Finish(CallGloo(Where("reduce_scatter", options.tag, RingPeers()), [&] {
    auto acc_buf = context_->createUnboundBuffer(acc.data(), acc.size() * sizeof(float));
    auto in_buf = context_->createUnboundBuffer(incoming.data(), chunk_bytes);
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, options.tag);
    for (int step = 0; step < n - 1; ++step) {
      const size_t send_chunk = static_cast<size_t>((r - step - 1 + 2 * n) % n);
      const size_t recv_chunk = static_cast<size_t>((r - step - 2 + 2 * n) % n);
      in_buf->recv(left, slot, 0, chunk_bytes);
      acc_buf->send(right, slot, send_chunk * chunk_bytes, chunk_bytes);
      Completed(in_buf->waitRecv(timeout), "receive");
      float* target = acc.data() + recv_chunk * chunk;
      for (size_t i = 0; i < chunk; ++i) target[i] += incoming[i];
      Completed(acc_buf->waitSend(timeout), "send");
    }
  })));
  std::copy(acc.begin() + r * chunk, acc.begin() + (r + 1) * chunk, out.begin());
  if (op == ReduceOp::kAvg) Scale(out, n);
  meter_.RecordCall(RingReduceScatterTraffic(n, static_cast<int64_t>(data.size()) * kBytesPerElement));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                         const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, Begin("allgather", options));
  const int n = world();
  RETURN_IF_ERROR(CheckAllGatherSizes(Where("allgather", options.tag, ""), in.size(), out.size(), n));
  if (in.empty()) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  if (n == 1) {
    std::copy(in.begin(), in.end(), out.begin());
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(CallGloo(Where("allgather", options.tag, RingPeers()), [&] {
    gloo::AllgatherOptions o(context_);
    o.setInput(const_cast<float*>(in.data()), in.size());
    o.setOutput(out.data(), out.size());
    o.setTag(options.tag);
    o.setTimeout(timeout);
    gloo::allgather(o);
  })));
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
    if (send.size() != recv.size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", send.size(), " elements sent to itself, ",
                                                     recv.size(), " received"));
    }
    std::copy(send.begin(), send.end(), recv.begin());
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
