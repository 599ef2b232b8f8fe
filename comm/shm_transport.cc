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
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/collective_checks.h"
#include "core/status_macros.h"

namespace nereid {

namespace {

constexpr uint64_t kMagic = 0x6e65726569647368;  // "nereidsh"
constexpr uint32_t kLayoutVersion = 1;
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

struct alignas(64) ShmTransport::Slot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> produced;  // pieces the sender has written
  std::atomic<uint32_t> consumed;  // pieces the receiver has taken
  std::atomic<int32_t> ring;       // the ring the sender streams through
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> seq;  // posting order: the oldest matching slot is served first
};

struct alignas(64) ShmTransport::Channel {
  std::atomic<uint64_t> next_seq;
  std::atomic<uint32_t> ring_busy[kRings];  // 1 while a message streams through it
  Slot slots[kSlots];
};

struct alignas(64) Doorbell {
  std::atomic<uint32_t> rings;
  std::atomic<uint32_t> sleepers;
};

struct ShmTransport::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t world;
  std::atomic<uint32_t> attached;
  std::atomic<int32_t> pid[kMaxWorld];
  Doorbell bells[kMaxWorld];
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

void ShmTransport::Ring(int rank) const {
  Doorbell& bell = header().bells[rank];
  bell.rings.fetch_add(1, std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_seq_cst) > 0) Futex(&bell.rings, FUTEX_WAKE, INT_MAX, nullptr);
}

void ShmTransport::Sleep(uint32_t seen, absl::Duration limit) const {
  Doorbell& bell = header().bells[rank_];
  // The peer is often running on the other core: a few yields catch most
  // events without a system call each way.
  for (int i = 0; i < 8; ++i) {
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

absl::Status ShmTransport::Exchange(uint64_t key, Transfer send, const Produce& produce, Transfer recv,
                                    const Consume& consume, absl::Time deadline, AbortSignal* abort,
                                    const std::string& where) {
  const bool sending = send.peer >= 0 && send.bytes > 0;
  const bool receiving = recv.peer >= 0 && recv.bytes > 0;
  if (sending) RETURN_IF_ERROR(CheckPeer(where, send.peer, rank_, world_));
  if (receiving) RETURN_IF_ERROR(CheckPeer(where, recv.peer, rank_, world_));
  AbortRegistration registration(abort, [this] { Ring(rank_); });

  const uint32_t send_pieces = static_cast<uint32_t>((send.bytes + kPieceBytes - 1) / kPieceBytes);
  const uint32_t recv_pieces = static_cast<uint32_t>((recv.bytes + kPieceBytes - 1) / kPieceBytes);
  int send_slot = -1, recv_slot = -1;  // matched / posted
  int send_ring = -1;                  // the ring the send streams through
  absl::Status gone;                   // a peer found exited, pending one more pass
  absl::Time next_liveness_check = absl::Now() + kLivenessEvery;  // kill(2) only this often
  uint32_t sent = 0, received = 0;
  bool send_done = !sending, recv_done = !receiving;
  Channel* out = sending ? &channel(rank_, send.peer) : nullptr;
  Channel* in = receiving ? &channel(recv.peer, rank_) : nullptr;

  // On failure: leave the slots so the peer sees it, and wake the peer.
  auto fail = [&](absl::Status status) {
    if (!recv_done && recv_slot >= 0) {
      in->slots[recv_slot].state.store(kAbandoned, std::memory_order_release);
      Ring(recv.peer);
    }
    if (!send_done && send_slot >= 0) {
      out->slots[send_slot].state.store(kSendFailed, std::memory_order_release);
      Ring(send.peer);
    }
    return status;
  };

  while (!send_done || !recv_done) {
    const uint32_t seen = header().bells[rank_].rings.load(std::memory_order_acquire);
    bool progressed = false;

    if (!recv_done && recv_slot < 0) {  // post the receive
      for (int s = 0; s < kSlots && recv_slot < 0; ++s) {
        uint32_t expected = kFree;
        Slot& slot = in->slots[s];
        if (slot.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
          slot.produced.store(0, std::memory_order_relaxed);
          slot.consumed.store(0, std::memory_order_relaxed);
          slot.ring.store(-1, std::memory_order_relaxed);
          slot.key.store(key, std::memory_order_relaxed);
          slot.bytes.store(recv.bytes, std::memory_order_relaxed);
          slot.seq.store(in->next_seq.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
          slot.state.store(kPosted, std::memory_order_release);
          recv_slot = s;
          Ring(recv.peer);
          progressed = true;
        }
      }
    }
    if (!recv_done && recv_slot >= 0) {  // drain what has arrived
      Slot& slot = in->slots[recv_slot];
      const uint32_t state = slot.state.load(std::memory_order_acquire);
      if (state == kMismatch) {
        recv_done = true;  // the sender has left the slot: free it for later receives
        slot.state.store(kFree, std::memory_order_release);
        Ring(rank_);
        return fail(absl::InvalidArgumentError(absl::StrCat(where, ": rank ", recv.peer,
                                                            " sent a message of another size than the ",
                                                            recv.bytes, " bytes expected")));
      }
      if (state == kSendFailed) {
        return fail(absl::UnavailableError(absl::StrCat(where, ": rank ", recv.peer, " failed mid-message")));
      }
      const uint32_t ready = slot.produced.load(std::memory_order_acquire);
      while (received < ready) {
        const size_t offset = static_cast<size_t>(received) * kPieceBytes;
        const size_t length = std::min(kPieceBytes, recv.bytes - offset);
        const int r = slot.ring.load(std::memory_order_relaxed);  // written before the first piece
        consume(ring(recv.peer, rank_, r) + (received % kRing) * kPieceBytes, offset, length);
        ++received;
        slot.consumed.store(received, std::memory_order_release);
        Ring(recv.peer);
        progressed = true;
      }
      if (received == recv_pieces) {
        recv_done = true;
        in->ring_busy[slot.ring.load(std::memory_order_relaxed)].store(0, std::memory_order_release);
        slot.state.store(kFree, std::memory_order_release);
        Ring(recv.peer);  // its other sends may be waiting for the ring
        Ring(rank_);      // this rank's other receives may be waiting for a slot
      }
    }

    if (!send_done && send_slot < 0) {  // find the oldest receive posted with this key
      int best = -1;
      uint64_t best_seq = 0;
      for (int s = 0; s < kSlots; ++s) {
        Slot& slot = out->slots[s];
        if (slot.state.load(std::memory_order_acquire) != kPosted) continue;
        if (slot.key.load(std::memory_order_relaxed) != key) continue;
        const uint64_t seq = slot.seq.load(std::memory_order_relaxed);
        if (best < 0 || seq < best_seq) best = s, best_seq = seq;
      }
      uint32_t expected = kPosted;
      if (best >= 0 && out->slots[best].state.compare_exchange_strong(expected, kStreaming,
                                                                       std::memory_order_acq_rel)) {
        const uint64_t want = out->slots[best].bytes.load(std::memory_order_relaxed);
        if (want != send.bytes) {
          out->slots[best].state.store(kMismatch, std::memory_order_release);
          Ring(send.peer);
          send_done = true;
          return fail(absl::InvalidArgumentError(absl::StrCat(where, ": sending ", send.bytes, " bytes but rank ",
                                                              send.peer, " expects ", want)));
        }
        send_slot = best;
        progressed = true;
      }
    }
    if (!send_done && send_slot >= 0 && send_ring < 0) {  // take a free ring of the channel
      for (int r = 0; r < kRings && send_ring < 0; ++r) {
        uint32_t idle = 0;
        if (out->ring_busy[r].compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) {
          send_ring = r;
          out->slots[send_slot].ring.store(r, std::memory_order_relaxed);  // published by the first piece
          progressed = true;
        }
      }
    }
    if (!send_done && send_ring >= 0) {  // stream while the ring has room
      Slot& slot = out->slots[send_slot];
      if (slot.state.load(std::memory_order_acquire) == kAbandoned) {
        send_done = true;  // nothing more to tell the receiver
        return fail(absl::UnavailableError(absl::StrCat(where, ": rank ", send.peer, " gave up receiving")));
      }
      const uint32_t drained = slot.consumed.load(std::memory_order_acquire);
      while (sent < send_pieces && sent - drained < static_cast<uint32_t>(kRing)) {
        const size_t offset = static_cast<size_t>(sent) * kPieceBytes;
        const size_t length = std::min(kPieceBytes, send.bytes - offset);
        produce(ring(rank_, send.peer, send_ring) + (sent % kRing) * kPieceBytes, offset, length);
        ++sent;
        slot.produced.store(sent, std::memory_order_release);
        Ring(send.peer);
        progressed = true;
      }
      // The receiver frees the slot once it has taken the last piece.
      if (sent == send_pieces) send_done = true;
    }

    if (progressed || (send_done && recv_done)) {
      gone = absl::OkStatus();
      continue;
    }
    if (!gone.ok()) return fail(gone);  // a whole pass after the exit was seen moved nothing
    if (abort != nullptr && abort->fired()) {
      return fail(absl::CancelledError(absl::StrCat(where, ": aborted (this rank is failing)")));
    }
    const int waiting_for = !recv_done ? recv.peer : send.peer;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      const char* what = !recv_done ? (recv_slot < 0 ? "one of this rank's receive slots (all in use) for"
                                                     : "data from")
                                    : (send_slot < 0 ? "a posted receive on"
                                                     : send_ring < 0 ? "a free ring to" : "room on");
      return fail(absl::DeadlineExceededError(absl::StrCat(where, ": timed out waiting for ", what, " rank ",
                                                           waiting_for)));
    }
    // Both peers of a ring step (the one that exited may be the one not
    // waited for), every kLivenessEvery: not a system call per short wait.
    if (now >= next_liveness_check) {
      next_liveness_check = now + kLivenessEvery;
      for (int peer : {!recv_done ? recv.peer : -1, !send_done ? send.peer : -1}) {
        if (peer >= 0 && gone.ok()) gone = PeerAlive(peer, where);
      }
      // An exited peer may have left all it sent in the rings: one more pass
      // takes it before the exit counts.
      if (!gone.ok()) continue;
    }
    Sleep(seen, std::min(deadline - now, kLivenessEvery));
  }
  return absl::OkStatus();
}

}  // namespace nereid
