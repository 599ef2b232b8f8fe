#include "comm/shm_communicator.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/collective_checks.h"
#include "comm/ring_collectives.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

// The operation, in a key's high 32 bits.
enum class Op : uint64_t { kPointToPoint = 1, kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };

uint64_t Key(Op op, uint32_t tag) { return (static_cast<uint64_t>(op) << 32) | tag; }

constexpr int64_t kFloatBytes = sizeof(float);

ShmTransport::Produce CopyFrom(const float* from) {
  return [from](uint8_t* dst, size_t offset, size_t length) {
    std::memcpy(dst, reinterpret_cast<const uint8_t*>(from) + offset, length);
  };
}
ShmTransport::Consume CopyInto(float* into) {
  return [into](const uint8_t* src, size_t offset, size_t length) {
    std::memcpy(reinterpret_cast<uint8_t*>(into) + offset, src, length);
  };
}

}  // namespace

ShmCommunicator::ShmCommunicator(std::unique_ptr<ShmSegment> segment, std::unique_ptr<ShmTransport> transport)
    : segment_(std::move(segment)), transport_(std::move(transport)) {}

std::string ShmCommunicator::Where(const char* op, uint32_t tag, const std::string& peers) const {
  std::string where = absl::StrCat("shm ", op, " (tag ", tag, ", rank ", rank(), " of ", world());
  if (!peers.empty()) absl::StrAppend(&where, ", ", peers);
  return where + ")";
}

absl::StatusOr<absl::Time> ShmCommunicator::Begin(const char* op, const CollectiveOptions& options) const {
  const std::string where = Where(op, options.tag, "");
  RETURN_IF_ERROR(failure_.CheckUsable(where));
  RETURN_IF_ERROR(CheckTimeout(where, options.timeout));
  return absl::Now() + options.timeout;
}

absl::Status ShmCommunicator::Move(uint64_t key, absl::Span<const float> send, int to, absl::Span<float> recv,
                                   int from, absl::Time deadline, AbortSignal* abort, const std::string& where) {
  ShmTransport::Transfer out{to, send.size() * sizeof(float)};
  ShmTransport::Transfer in{from, recv.size() * sizeof(float)};
  return transport_->Exchange(key, out, CopyFrom(send.data()), in, CopyInto(recv.data()), deadline, abort, where);
}

RingExchange ShmCommunicator::Ring(const char* op_name, uint64_t key, absl::Time deadline,
                                   const CollectiveOptions& options) {
  const int n = world(), right = (rank() + 1) % n, left = (rank() + n - 1) % n;
  std::string where = Where(op_name, options.tag, absl::StrCat("ring neighbours ", left, " and ", right));
  return [this, key, right, left, deadline, abort = options.abort, where = std::move(where)](const RingStep& step) {
    return transport_->Exchange(key, {right, step.send_bytes}, step.produce, {left, step.recv_bytes}, step.consume,
                                deadline, abort, where);
  };
}

absl::Status ShmCommunicator::AllReduce(absl::Span<float> data, ReduceOp op, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("allreduce", options));
  const int n = world();
  if (data.empty() || n == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const RingExchange ring = Ring("allreduce", Key(Op::kAllReduce, options.tag), deadline, options);
  RETURN_IF_ERROR(Finish(RingAllReduce(data, rank(), n, options.wire, ring)));
  if (op == ReduceOp::kAvg) ScaleToAverage(data, n);
  meter_.RecordCall(RingAllReduceTraffic(n, static_cast<int64_t>(data.size()) * WireBytesPerElement(options.wire)));
  return absl::OkStatus();
}

absl::Status ShmCommunicator::ReduceScatter(absl::Span<const float> data, absl::Span<float> out, ReduceOp op,
                                            const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("reduce_scatter", options));
  const int n = world();
  RETURN_IF_ERROR(CheckReduceScatterSizes(Where("reduce_scatter", options.tag, ""), data.size(), out.size(), n));
  if (CollectedLocally(data, out, n)) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const RingExchange ring = Ring("reduce_scatter", Key(Op::kReduceScatter, options.tag), deadline, options);
  RETURN_IF_ERROR(Finish(RingReduceScatter(data, out, rank(), n, ring)));
  if (op == ReduceOp::kAvg) ScaleToAverage(out, n);
  meter_.RecordCall(RingReduceScatterTraffic(n, static_cast<int64_t>(data.size()) * kFloatBytes));
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                        const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("allgather", options));
  const int n = world();
  RETURN_IF_ERROR(CheckAllGatherSizes(Where("allgather", options.tag, ""), in.size(), out.size(), n));
  if (CollectedLocally(in, out, n)) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const RingExchange ring = Ring("allgather", Key(Op::kAllGather, options.tag), deadline, options);
  RETURN_IF_ERROR(Finish(RingAllGather(in, out, rank(), n, ring)));
  meter_.RecordCall(RingAllGatherTraffic(n, static_cast<int64_t>(out.size()) * kFloatBytes));
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Broadcast(absl::Span<float> data, int root, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("broadcast", options));
  const int n = world();
  RETURN_IF_ERROR(CheckRoot(Where("broadcast", options.tag, ""), root, n));
  if (data.empty() || n == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const std::string where = Where("broadcast", options.tag, absl::StrCat("root ", root));
  const uint64_t key = Key(Op::kBroadcast, options.tag);
  // Binomial tree over virtual ranks v = (rank - root) mod n: v receives from
  // v without its highest set bit, then sends to v + 2^i for every 2^i above it.
  const int v = (rank() - root + n) % n;
  int high = 0;  // v's highest set bit as a power of two (0 for the root)
  for (int b = 1; b <= v; b <<= 1) {
    if (v & b) high = b;
  }
  if (v != 0) {
    const int parent = ((v - high) + root) % n;
    RETURN_IF_ERROR(Finish(Move(key, {}, -1, data, parent, deadline, options.abort, where)));
  }
  for (int step = v == 0 ? 1 : high << 1; v + step < n; step <<= 1) {
    const int child = (v + step + root) % n;
    RETURN_IF_ERROR(Finish(Move(key, data, child, {}, -1, deadline, options.abort, where)));
  }
  meter_.RecordCall(BinomialBroadcastTraffic(n, rank(), root, static_cast<int64_t>(data.size()) * kFloatBytes));
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Send(absl::Span<const float> data, int peer, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("send", options));
  RETURN_IF_ERROR(CheckPeer(Where("send", options.tag, ""), peer, rank(), world()));
  if (data.empty()) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(Move(Key(Op::kPointToPoint, options.tag), data, peer, {}, -1, deadline, options.abort,
                              Where("send", options.tag, absl::StrCat("peer ", peer)))));
  meter_.RecordCall({static_cast<int64_t>(data.size()) * kFloatBytes, 0});
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Recv(absl::Span<float> data, int peer, const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("recv", options));
  RETURN_IF_ERROR(CheckPeer(Where("recv", options.tag, ""), peer, rank(), world()));
  if (data.empty()) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(Move(Key(Op::kPointToPoint, options.tag), {}, -1, data, peer, deadline, options.abort,
                              Where("recv", options.tag, absl::StrCat("peer ", peer)))));
  meter_.RecordCall({0, static_cast<int64_t>(data.size()) * kFloatBytes});
  return absl::OkStatus();
}

void ShmCommunicator::StartSend(absl::Span<const float> data, int peer, const CollectiveOptions& options,
                                Done done) {
  StartMove("send", data, peer, {}, -1, options, std::move(done));
}

void ShmCommunicator::StartRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, Done done) {
  StartMove("recv", {}, -1, data, peer, options, std::move(done));
}

void ShmCommunicator::StartMove(const char* op, absl::Span<const float> send, int to, absl::Span<float> recv,
                                int from, const CollectiveOptions& options, Done done) {
  const int peer = to >= 0 ? to : from;
  absl::StatusOr<absl::Time> deadline = Begin(op, options);
  if (!deadline.ok()) return done(deadline.status());
  std::string where = Where(op, options.tag, absl::StrCat("peer ", peer));
  if (absl::Status checked = CheckPeer(where, peer, rank(), world()); !checked.ok()) return done(checked);
  if (send.empty() && recv.empty()) {
    meter_.RecordCall();
    return done(absl::OkStatus());
  }
  const TrafficBytes moved{static_cast<int64_t>(send.size()) * kFloatBytes,
                           static_cast<int64_t>(recv.size()) * kFloatBytes};
  absl::StatusOr<ShmTransport::PendingExchange> pending = transport_->Start(
      Key(Op::kPointToPoint, options.tag), {to, send.size() * sizeof(float)}, CopyFrom(send.data()),
      {from, recv.size() * sizeof(float)}, CopyInto(recv.data()), *deadline, options.abort, std::move(where));
  if (!pending.ok()) return done(Finish(pending.status()));
  progress_.Submit(std::move(*pending), [this, moved, done = std::move(done)](absl::Status status) {
    status = Finish(std::move(status));
    if (status.ok()) meter_.RecordCall(moved);
    done(std::move(status));
  });
}

absl::Status ShmCommunicator::SendRecv(absl::Span<const float> send, int to, absl::Span<float> recv, int from,
                                       const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("sendrecv", options));
  const std::string where = Where("sendrecv", options.tag, absl::StrCat("to ", to, ", from ", from));
  RETURN_IF_ERROR(CheckSendRecvPeers(where, to, from, rank(), world()));
  if (to == rank()) {
    RETURN_IF_ERROR(SendRecvToSelf(where, send, recv));
    meter_.RecordCall();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Finish(Move(Key(Op::kPointToPoint, options.tag), send, to, recv, from, deadline, options.abort,
                              where)));
  meter_.RecordCall({static_cast<int64_t>(send.size()) * kFloatBytes, static_cast<int64_t>(recv.size()) * kFloatBytes});
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Barrier(const CollectiveOptions& options) {
  ASSIGN_OR_RETURN(const absl::Time deadline, Begin("barrier", options));
  const int n = world();
  if (n == 1) {
    meter_.RecordCall();
    return absl::OkStatus();
  }
  const std::string where = Where("barrier", options.tag, "dissemination peers");
  const uint64_t key = Key(Op::kBarrier, options.tag);
  float token = 0, got = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    RETURN_IF_ERROR(Finish(Move(key, absl::MakeConstSpan(&token, 1), (rank() + distance) % n,
                                absl::MakeSpan(&got, 1), (rank() - distance + n) % n, deadline, options.abort, where)));
  }
  meter_.RecordCall();
  return absl::OkStatus();
}

absl::Status ShmFits(int world) {
  if (world > ShmTransport::kMaxWorld) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shm transport takes at most ", ShmTransport::kMaxWorld, " ranks, not ", world));
  }
  const size_t bytes = ShmTransport::SegmentBytes(world);
  struct statvfs fs;
  if (::statvfs("/dev/shm", &fs) != 0) return absl::UnavailableError("no /dev/shm on this machine");
  const double free_bytes = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
  if (free_bytes < static_cast<double>(bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat("the shm transport needs %.0f MiB of /dev/shm for %d ranks; "
                                                        "%.0f MiB are free",
                                                        bytes / 1048576.0, world, free_bytes / 1048576.0));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectShm(RendezvousStore& store, int rank, int world,
                                                         absl::Duration timeout) {
  const std::string where = absl::StrCat("shm connect (rank ", rank, " of ", world, ", ", store.name(), ")");
  auto here = [&](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
  };
  if (world < 1 || world > ShmTransport::kMaxWorld || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": need 0 <= rank < world <= ", ShmTransport::kMaxWorld));
  }
  const size_t bytes = ShmTransport::SegmentBytes(world);
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_ptr<ShmSegment> segment;
  if (rank == 0) {
    ShmSegment::RemoveAbandoned("nereid-");  // left by runs killed while they connected
    std::random_device random;
    const std::string name =
        absl::StrFormat("/nereid-%d-%08x%08x", static_cast<int>(::getpid()), random(), random());
    absl::StatusOr<std::unique_ptr<ShmSegment>> created = ShmSegment::Create(name, bytes);
    if (!created.ok()) return here(created.status());
    segment = std::move(*created);
    ShmTransport::Format(segment->base(), world);
    if (absl::Status s = store.Set("shm/segment", name); !s.ok()) return here(s);
  } else {
    absl::StatusOr<std::string> name = store.WaitAndGet("shm/segment", timeout);
    if (!name.ok()) return here(name.status());
    absl::StatusOr<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open(*name, bytes);
    if (!opened.ok()) return here(opened.status());
    segment = std::move(*opened);
  }
  absl::StatusOr<std::unique_ptr<ShmTransport>> transport = ShmTransport::Attach(segment->base(), world, rank);
  if (!transport.ok()) return here(transport.status());
  if (rank == 0) {
    // Every rank has mapped the segment: its name is no longer needed.
    while (ShmTransport::Attached(segment->base()) < world) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(where, ": only ", ShmTransport::Attached(segment->base()),
                                                        " of ", world, " ranks attached to ", segment->name(),
                                                        " within ", absl::FormatDuration(timeout)));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    segment->Unlink();
  }
  return std::unique_ptr<Communicator>(new ShmCommunicator(std::move(segment), *std::move(transport)));
}

}  // namespace nereid
