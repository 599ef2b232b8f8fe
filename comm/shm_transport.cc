#include "comm/shm_transport.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <ctime>
#include <memory>
#include <new>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/collective_checks.h"
#include "core/status_macros.h"

namespace nereid {

namespace {

constexpr uint64_t kMagic = 0x6e65726569647368;  // "nereidsh"
constexpr uint32_t kLayoutVersion = 2;
// How often a waiting rank checks that its peers' processes live (and the
// longest it sleeps between checks of its deadline).
constexpr absl::Duration kLivenessEvery = absl::Milliseconds(50);

// Slot states. Posted and streaming slots belong to one transfer; mismatched,
// abandoned and failed ones are never reused (the communicator is broken).
enum SlotState : uint32_t {
  kFree = 0,
  kClaimed = 1,    // a receiver is writing its key and size
  kPosted = 2,     // waiting for its sender
  kStreaming = 3,  // the sender is writing pieces
  kMismatch = 4,   // the sender's size differed
  kAbandoned = 5,  // the receiver gave up
  kSendFailed = 6  // the sender gave up mid-message
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

struct Doorbell {
  std::atomic<uint32_t> rings;
  std::atomic<uint32_t> sleepers;
};

struct alignas(64) ShmTransport::Slot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> produced;  // pieces the sender has written
  std::atomic<uint32_t> consumed;  // pieces the receiver has taken
  std::atomic<int32_t> ring;       // the ring the sender streams through
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> seq;  // posting order: the oldest matching slot is served first
  Doorbell bell;              // the message's events: a piece written or taken, a side failed
};

struct alignas(64) ShmTransport::Channel {
  std::atomic<uint64_t> next_seq;
  Doorbell bell;  // a receive posted, a ring or a slot freed
  std::atomic<uint32_t> ring_busy[kRings];  // 1 while a message streams through it
  Slot slots[kSlots];
};

struct ShmTransport::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t world;
  std::atomic<uint32_t> attached;
  std::atomic<int32_t> pid[kMaxWorld];
  struct alignas(64) AnyEvent {
    Doorbell bell;
  } bells[kMaxWorld];  // per rank: every event that rank may wait for
};

namespace {

size_t ChannelCount(int world) { return static_cast<size_t>(world) * static_cast<size_t>(world - 1); }
size_t ControlBytes(int world) {
  return RoundUp(sizeof(ShmTransport::Header) + ChannelCount(world) * sizeof(ShmTransport::Channel) + 64, 4096);
}
size_t RingBytes() { return ShmTransport::kRing * ShmTransport::kPieceBytes; }

}  // namespace

size_t ShmTransport::SegmentBytes(int world) {
  return ControlBytes(world) + ChannelCount(world) * kRings * RingBytes();
}

void ShmTransport::Format(void* base, int world) {
  // The segment arrives zero-filled: every atomic already reads 0 (kFree).
  Header* h = new (base) Header();
  h->magic = kMagic;
  h->version = kLayoutVersion;
  h->world = static_cast<uint32_t>(world);
}

int ShmTransport::Attached(const void* base) {
  return static_cast<int>(static_cast<const Header*>(base)->attached.load(std::memory_order_acquire));
}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Attach(void* base, int world, int rank) {
  if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm transport: rank ", rank, " of world ", world, " (at most ", kMaxWorld, " ranks)"));
  }
  Header* h = static_cast<Header*>(base);
  if (h->magic != kMagic || h->version != kLayoutVersion || h->world != static_cast<uint32_t>(world)) {
    return absl::FailedPreconditionError(absl::StrCat("shm transport: the segment was laid out for world ", h->world,
                                                      " (version ", h->version, "), not for rank ", rank,
                                                      " of world ", world));
  }
  h->pid[rank].store(static_cast<int32_t>(::getpid()), std::memory_order_release);
  h->attached.fetch_add(1, std::memory_order_acq_rel);
  return std::unique_ptr<ShmTransport>(new ShmTransport(base, world, rank));
}

ShmTransport::Header& ShmTransport::header() const { return *reinterpret_cast<Header*>(base_); }

ShmTransport::Channel& ShmTransport::channel(int src, int dst) const {
  const size_t index = static_cast<size_t>(src) * (world_ - 1) + (dst < src ? dst : dst - 1);
  auto* first = reinterpret_cast<Channel*>(base_ + RoundUp(sizeof(Header), 64));
  return first[index];
}

uint8_t* ShmTransport::ring(int src, int dst, int ring) const {
  const size_t index = static_cast<size_t>(src) * (world_ - 1) + (dst < src ? dst : dst - 1);
  return base_ + ControlBytes(world_) + (index * kRings + ring) * RingBytes();
}

namespace {

void RingBell(Doorbell& bell) {
  bell.rings.fetch_add(1, std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_seq_cst) > 0) Futex(&bell.rings, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace

void ShmTransport::Ring(Doorbell& bell, int rank) const {
  RingBell(bell);
  RingBell(header().bells[rank].bell);
}

void ShmTransport::RingAll(int rank) const {
  RingBell(header().bells[rank].bell);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank) continue;
    for (Channel* c : {&channel(rank, peer), &channel(peer, rank)}) {
      RingBell(c->bell);
      for (Slot& slot : c->slots) {
        if (slot.bell.sleepers.load(std::memory_order_seq_cst) > 0) RingBell(slot.bell);
      }
    }
  }
}

void ShmTransport::Sleep(Doorbell& bell, uint32_t seen, absl::Duration limit, bool streaming) const {
  // Mid-message the peer is often running on the other core: a few yields
  // catch its next piece without a system call each way. A transfer still
  // waiting for its peer to start (a pull posted at the step's start) sleeps
  // at once: its yields would take the cores from the ranks it waits for.
  for (int i = 0; streaming && i < 8; ++i) {
    if (bell.rings.load(std::memory_order_acquire) != seen) return;
    std::this_thread::yield();
  }
  const struct timespec timeout = absl::ToTimespec(std::max(limit, absl::ZeroDuration()));
  bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
  // Returns at once if a ring came in since `seen` was read (no lost wakeup).
  Futex(&bell.rings, FUTEX_WAIT, seen, &timeout);
  bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

absl::Status ShmTransport::PeerAlive(int peer, const std::string& where) const {
  const int32_t pid = header().pid[peer].load(std::memory_order_acquire);
  if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
    return absl::UnavailableError(absl::StrCat(where, ": rank ", peer, " (pid ", pid, ") has exited"));
  }
  return absl::OkStatus();
}

// One Exchange's arguments and progress, shared by its loop's steps.
struct ShmTransport::ExchangeState {
  ExchangeState(uint64_t key, Transfer send, Produce produce, Transfer recv, Consume consume, absl::Time deadline,
                AbortSignal* abort, std::string where)
      : key(key),
        send(send),
        produce(std::move(produce)),
        recv(recv),
        consume(std::move(consume)),
        deadline(deadline),
        abort(abort),
        where(std::move(where)) {}

  // The call's arguments.
  const uint64_t key;
  const Transfer send;
  const Produce produce;
  const Transfer recv;
  const Consume consume;
  const absl::Time deadline;
  AbortSignal* const abort;
  const std::string where;
  std::optional<AbortRegistration> registration;  // wakes this rank's waiters on an abort

  uint32_t send_pieces = 0, recv_pieces = 0;
  int send_slot = -1, recv_slot = -1;  // matched / posted
  int send_ring = -1;                  // the ring the send streams through
  absl::Status gone;                   // a peer found exited, pending one more pass
  absl::Time next_liveness_check;      // kill(2) only this often
  uint32_t sent = 0, received = 0;
  bool send_done = true, recv_done = true;
  Channel* out = nullptr;
  Channel* in = nullptr;
  bool progressed = false;  // the current pass moved something
};

Doorbell& ShmTransport::BellFor(const ExchangeState& st) const {
  if (st.recv_done == st.send_done) return header().bells[rank_].bell;  // two transfers to watch (or none)
  if (!st.recv_done) return st.recv_slot >= 0 ? st.in->slots[st.recv_slot].bell : st.in->bell;
  return st.send_slot >= 0 && st.send_ring >= 0 ? st.out->slots[st.send_slot].bell : st.out->bell;
}

void ShmTransport::ExchangeDeleter::operator()(ExchangeState* st) const { delete st; }

absl::Status ShmTransport::Prepare(ExchangeState& st) {
  const bool sending = st.send.peer >= 0 && st.send.bytes > 0;
  const bool receiving = st.recv.peer >= 0 && st.recv.bytes > 0;
  if (sending) RETURN_IF_ERROR(CheckPeer(st.where, st.send.peer, rank_, world_));
  if (receiving) RETURN_IF_ERROR(CheckPeer(st.where, st.recv.peer, rank_, world_));
  st.registration.emplace(st.abort, [this] { RingAll(rank_); });
  st.send_pieces = static_cast<uint32_t>((st.send.bytes + kPieceBytes - 1) / kPieceBytes);
  st.recv_pieces = static_cast<uint32_t>((st.recv.bytes + kPieceBytes - 1) / kPieceBytes);
  st.next_liveness_check = absl::Now() + kLivenessEvery;
  st.send_done = !sending;
  st.recv_done = !receiving;
  st.out = sending ? &channel(rank_, st.send.peer) : nullptr;
  st.in = receiving ? &channel(st.recv.peer, rank_) : nullptr;
  return absl::OkStatus();
}

absl::StatusOr<ShmTransport::PendingExchange> ShmTransport::Start(uint64_t key, Transfer send, Produce produce,
                                                                  Transfer recv, Consume consume,
                                                                  absl::Time deadline, AbortSignal* abort,
                                                                  std::string where) {
  PendingExchange st(new ExchangeState(key, send, std::move(produce), recv, std::move(consume), deadline, abort,
                                       std::move(where)));
  RETURN_IF_ERROR(Prepare(*st));
  return st;
}

absl::StatusOr<ShmTransport::Pass> ShmTransport::Advance(ExchangeState& st) {
  st.progressed = false;
  if (!st.recv_done && st.recv_slot < 0) PostReceive(st);                      // post the receive
  if (!st.recv_done && st.recv_slot >= 0) RETURN_IF_ERROR(DrainReceive(st));  // drain what has arrived
  if (!st.send_done && st.send_slot < 0) RETURN_IF_ERROR(MatchSend(st));      // find the oldest receive posted
  if (!st.send_done && st.send_slot >= 0 && st.send_ring < 0) TakeRing(st);   // take a free ring of the channel
  if (!st.send_done && st.send_ring >= 0) RETURN_IF_ERROR(StreamSend(st));    // stream while the ring has room
  if (st.send_done && st.recv_done) return Pass::kDone;
  if (!st.progressed) return Pass::kWaiting;
  st.gone = absl::OkStatus();
  return Pass::kMoved;
}

bool ShmTransport::Streaming(const ExchangeState& st) const {
  return (!st.recv_done && st.recv_slot >= 0 &&
          st.in->slots[st.recv_slot].state.load(std::memory_order_relaxed) == kStreaming) ||
         (!st.send_done && st.send_ring >= 0);
}

uint32_t ShmTransport::AnyEvents() const { return header().bells[rank_].bell.rings.load(std::memory_order_acquire); }

void ShmTransport::WaitForAnyEvent(uint32_t seen, absl::Duration limit, bool streaming) const {
  Sleep(header().bells[rank_].bell, seen, limit, streaming);
}

void ShmTransport::WakeAnyEventWaiter() const { RingBell(header().bells[rank_].bell); }

absl::Status ShmTransport::Exchange(uint64_t key, Transfer send, const Produce& produce, Transfer recv,
                                    const Consume& consume, absl::Time deadline, AbortSignal* abort,
                                    const std::string& where) {
  // On the stack: a ring collective makes one exchange per step.
  ExchangeState st(key, send, produce, recv, consume, deadline, abort, where);
  RETURN_IF_ERROR(Prepare(st));
  for (;;) {
    // Every event this pass could wait for rings this bell, so one rung
    // after this read ends the sleep at once (no lost wakeup).
    Doorbell& bell = BellFor(st);
    const uint32_t seen = bell.rings.load(std::memory_order_acquire);
    ASSIGN_OR_RETURN(const Pass pass, Advance(st));
    if (pass == Pass::kDone) return absl::OkStatus();
    if (pass == Pass::kMoved) continue;
    ASSIGN_OR_RETURN(const bool again, Stalled(st));
    if (again) continue;
    Sleep(bell, seen, std::min(st.deadline - absl::Now(), kLivenessEvery), Streaming(st));
  }
}

absl::Status ShmTransport::Fail(const ExchangeState& st, absl::Status status) {
  // Leave the slots so the peer sees it, and wake the peer.
  if (!st.recv_done && st.recv_slot >= 0) {
    st.in->slots[st.recv_slot].state.store(kAbandoned, std::memory_order_release);
    Ring(st.in->slots[st.recv_slot].bell, st.recv.peer);
  }
  if (!st.send_done && st.send_slot >= 0) {
    st.out->slots[st.send_slot].state.store(kSendFailed, std::memory_order_release);
    Ring(st.out->slots[st.send_slot].bell, st.send.peer);
  }
  return status;
}

void ShmTransport::PostReceive(ExchangeState& st) {
  for (int s = 0; s < kSlots && st.recv_slot < 0; ++s) {
    uint32_t expected = kFree;
    Slot& slot = st.in->slots[s];
    if (slot.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
      slot.produced.store(0, std::memory_order_relaxed);
      slot.consumed.store(0, std::memory_order_relaxed);
      slot.ring.store(-1, std::memory_order_relaxed);
      slot.key.store(st.key, std::memory_order_relaxed);
      slot.bytes.store(st.recv.bytes, std::memory_order_relaxed);
      slot.seq.store(st.in->next_seq.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
      slot.state.store(kPosted, std::memory_order_release);
      st.recv_slot = s;
      Ring(st.in->bell, st.recv.peer);  // its sends may be waiting for this receive
      st.progressed = true;
    }
  }
}

absl::Status ShmTransport::DrainReceive(ExchangeState& st) {
  Slot& slot = st.in->slots[st.recv_slot];
  const uint32_t state = slot.state.load(std::memory_order_acquire);
  if (state == kMismatch) {
    st.recv_done = true;  // the sender has left the slot: free it for later receives
    slot.state.store(kFree, std::memory_order_release);
    Ring(st.in->bell, rank_);  // this rank's other receives may be waiting for a slot
    return Fail(st, absl::InvalidArgumentError(absl::StrCat(st.where, ": rank ", st.recv.peer,
                                                            " sent a message of another size than the ",
                                                            st.recv.bytes, " bytes expected")));
  }
  if (state == kSendFailed) {
    return Fail(st, absl::UnavailableError(absl::StrCat(st.where, ": rank ", st.recv.peer, " failed mid-message")));
  }
  const uint32_t ready = slot.produced.load(std::memory_order_acquire);
  while (st.received < ready) {
    const size_t offset = static_cast<size_t>(st.received) * kPieceBytes;
    const size_t length = std::min(kPieceBytes, st.recv.bytes - offset);
    const int r = slot.ring.load(std::memory_order_relaxed);  // written before the first piece
    st.consume(ring(st.recv.peer, rank_, r) + (st.received % kRing) * kPieceBytes, offset, length);
    ++st.received;
    slot.consumed.store(st.received, std::memory_order_release);
    Ring(slot.bell, st.recv.peer);
    st.progressed = true;
  }
  if (st.received == st.recv_pieces) {
    st.recv_done = true;
    st.in->ring_busy[slot.ring.load(std::memory_order_relaxed)].store(0, std::memory_order_release);
    slot.state.store(kFree, std::memory_order_release);
    // The channel's bell once: its sender's other sends may be waiting for the
    // ring, this rank's other receives for the slot; and both ranks' any-event bells.
    Ring(st.in->bell, st.recv.peer);
    RingBell(header().bells[rank_].bell);
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::MatchSend(ExchangeState& st) {
  int best = -1;
  uint64_t best_seq = 0;
  for (int s = 0; s < kSlots; ++s) {
    Slot& slot = st.out->slots[s];
    if (slot.state.load(std::memory_order_acquire) != kPosted) continue;
    if (slot.key.load(std::memory_order_relaxed) != st.key) continue;
    const uint64_t seq = slot.seq.load(std::memory_order_relaxed);
    if (best < 0 || seq < best_seq) best = s, best_seq = seq;
  }
  uint32_t expected = kPosted;
  if (best >= 0 && st.out->slots[best].state.compare_exchange_strong(expected, kStreaming,
                                                                        std::memory_order_acq_rel)) {
    const uint64_t want = st.out->slots[best].bytes.load(std::memory_order_relaxed);
    if (want != st.send.bytes) {
      st.out->slots[best].state.store(kMismatch, std::memory_order_release);
      Ring(st.out->slots[best].bell, st.send.peer);
      st.send_done = true;
      return Fail(st, absl::InvalidArgumentError(absl::StrCat(st.where, ": sending ", st.send.bytes,
                                                              " bytes but rank ", st.send.peer, " expects ", want)));
    }
    st.send_slot = best;
    st.progressed = true;
  }
  return absl::OkStatus();
}

void ShmTransport::TakeRing(ExchangeState& st) {
  for (int r = 0; r < kRings && st.send_ring < 0; ++r) {
    uint32_t idle = 0;
    if (st.out->ring_busy[r].compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) {
      st.send_ring = r;
      st.out->slots[st.send_slot].ring.store(r, std::memory_order_relaxed);  // published by the first piece
      st.progressed = true;
    }
  }
}

absl::Status ShmTransport::StreamSend(ExchangeState& st) {
  Slot& slot = st.out->slots[st.send_slot];
  if (slot.state.load(std::memory_order_acquire) == kAbandoned) {
    st.send_done = true;  // nothing more to tell the receiver
    return Fail(st, absl::UnavailableError(absl::StrCat(st.where, ": rank ", st.send.peer, " gave up receiving")));
  }
  const uint32_t drained = slot.consumed.load(std::memory_order_acquire);
  while (st.sent < st.send_pieces && st.sent - drained < static_cast<uint32_t>(kRing)) {
    const size_t offset = static_cast<size_t>(st.sent) * kPieceBytes;
    const size_t length = std::min(kPieceBytes, st.send.bytes - offset);
    st.produce(ring(rank_, st.send.peer, st.send_ring) + (st.sent % kRing) * kPieceBytes, offset, length);
    ++st.sent;
    slot.produced.store(st.sent, std::memory_order_release);
    Ring(slot.bell, st.send.peer);
    st.progressed = true;
  }
  // The receiver frees the slot once it has taken the last piece.
  if (st.sent == st.send_pieces) st.send_done = true;
  return absl::OkStatus();
}

absl::StatusOr<bool> ShmTransport::Stalled(ExchangeState& st) {
  if (!st.gone.ok()) return Fail(st, st.gone);  // a whole pass after the exit was seen moved nothing
  if (st.abort != nullptr && st.abort->fired()) {
    return Fail(st, absl::CancelledError(absl::StrCat(st.where, ": aborted (this rank is failing)")));
  }
  const int waiting_for = !st.recv_done ? st.recv.peer : st.send.peer;
  const absl::Time now = absl::Now();
  if (now >= st.deadline) {
    const char* what = !st.recv_done ? (st.recv_slot < 0 ? "one of this rank's receive slots (all in use) for"
                                                         : "data from")
                                     : (st.send_slot < 0 ? "a posted receive on"
                                                         : st.send_ring < 0 ? "a free ring to" : "room on");
    return Fail(st, absl::DeadlineExceededError(absl::StrCat(st.where, ": timed out waiting for ", what, " rank ",
                                                             waiting_for)));
  }
  // Both peers of a ring step (the one that exited may be the one not
  // waited for), every kLivenessEvery: not a system call per short wait.
  if (now >= st.next_liveness_check) {
    st.next_liveness_check = now + kLivenessEvery;
    for (int peer : {!st.recv_done ? st.recv.peer : -1, !st.send_done ? st.send.peer : -1}) {
      if (peer >= 0 && st.gone.ok()) st.gone = PeerAlive(peer, st.where);
    }
    // An exited peer may have left all it sent in the rings: one more pass
    // takes it before the exit counts.
    if (!st.gone.ok()) return true;  // no sleep: straight to that pass
  }
  return false;
}

}  // namespace nereid
