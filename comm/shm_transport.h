#ifndef NEREID_COMM_SHM_TRANSPORT_H_
#define NEREID_COMM_SHM_TRANSPORT_H_

// Point-to-point transfers between the processes of one host through a
// shared-memory segment (shm_segment.h): what the shm communicator builds its
// collectives on.
//
// Layout: a header (each rank's pid and doorbell), then one channel per
// ordered pair of ranks (src -> dst). A channel has kSlots slots, each a
// receive the destination has posted (key, size), and kRings rings of kRing
// pieces of kPieceBytes through which the source streams a message while the
// destination drains it, so a message of any size moves with two copies
// (into the ring, out of it) that overlap.
//
// Matching: the receiver posts first (claims a free slot, writes the key and
// size, marks it posted); the sender streams only to a slot posted with its
// key (the oldest, if several), as Gloo's TCP transport moves data only once
// the receiver has posted, taking a free ring of the channel for the
// message's time. So a message never waits in the channel for a receive that
// may not come; receives posted long before their sends (a server's pulls
// for later steps) hold a slot each, not a ring, and a ring is held only by a
// message whose receiver is draining it, so waiting for one always ends.
// Sizes must agree; a disagreement fails both sides naming both sizes.
//
// Waiting: every event a rank may wait for rings a doorbell, a futex word in
// the segment, as precise as the wait: a piece written or taken, or a side
// failing, rings the message's slot; a receive posted, or a ring or a slot
// freed, rings the channel; and each also rings the rank's any-event bell. A
// transfer under way sleeps on its slot, one waiting for a receive, a ring or
// a slot on its channel, and one waiting on two peers at once (a ring step)
// on the any-event bell; so a parameter server's dozens of waiting transfers
// are not all woken by every piece. A waiter sleeps only when no progress is
// possible, and wakes at least every 50 ms to check its
// deadline and whether its peers' processes are still alive (a peer that
// exited is Unavailable at once, not at the timeout). The abort signal rings
// the doorbell, so an abort ends the wait immediately.
//
// A failed transfer leaves its slot out of use; like a Gloo communicator
// after a timeout, the caller treats the transport as broken.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/abort_signal.h"

namespace nereid {

struct Doorbell;  // a futex word in the segment (shm_transport.cc)

class ShmTransport {
 public:
  static constexpr int kMaxWorld = 64;
  static constexpr int kSlots = 512;  // receives posted at once per channel
  static constexpr int kRings = 4;    // messages streaming at once per channel
  static constexpr int kRing = 4;     // pieces per ring
  static constexpr size_t kPieceBytes = size_t{128} << 10;

  // Bytes of a segment for `world` ranks.
  static size_t SegmentBytes(int world);
  // Written once, by the segment's creator, before any rank attaches.
  static void Format(void* base, int world);
  // Checks the header the creator wrote and publishes this rank's pid.
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Attach(void* base, int world, int rank);
  // Ranks that have attached so far.
  static int Attached(const void* base);

  // Fills bytes [offset, offset + length) of the message into `dst`.
  using Produce = std::function<void(uint8_t* dst, size_t offset, size_t length)>;
  // Takes bytes [offset, offset + length) of the message from `src`.
  using Consume = std::function<void(const uint8_t* src, size_t offset, size_t length)>;

  struct Transfer {
    int peer = -1;  // -1 or no bytes: nothing to move on this side
    size_t bytes = 0;
  };

  // Sends `send.bytes` to `send.peer` (produced piece by piece) and receives
  // `recv.bytes` from `recv.peer`, both at once, under `key`; returns when
  // both are done. `where` prefixes errors ("shm allreduce (tag 3, rank 0 of
  // 2)"). DeadlineExceeded at `deadline` naming the peer waited for,
  // Unavailable if that peer's process has exited, Cancelled if `abort`
  // fires, InvalidArgument if the sizes disagree.
  absl::Status Exchange(uint64_t key, Transfer send, const Produce& produce, Transfer recv, const Consume& consume,
                        absl::Time deadline, AbortSignal* abort, const std::string& where);

  // The same transfer driven by its caller, which may drive many from one
  // thread (shm_progress.h): Start checks the peers and returns its state;
  // Advance moves what it can without waiting; after a round in which nothing
  // moved, Stalled fails it on its deadline, an abort or an exited peer
  // (true: pass again at once instead of sleeping). A failed transfer's
  // state is spent; drop it.
  struct ExchangeState;
  struct ExchangeDeleter {
    void operator()(ExchangeState* st) const;
  };
  using PendingExchange = std::unique_ptr<ExchangeState, ExchangeDeleter>;
  enum class Pass { kDone, kMoved, kWaiting };
  absl::StatusOr<PendingExchange> Start(uint64_t key, Transfer send, Produce produce, Transfer recv, Consume consume,
                                        absl::Time deadline, AbortSignal* abort, std::string where);
  absl::StatusOr<Pass> Advance(ExchangeState& st);
  absl::StatusOr<bool> Stalled(ExchangeState& st);
  // Whether a message of the transfer is under way (its waits yield first).
  bool Streaming(const ExchangeState& st) const;
  // This rank's any-event bell, which every event for the rank rings: read it
  // before a round of passes, and sleep on it after a round that moved
  // nothing; WakeAnyEventWaiter rings it (a new transfer to drive).
  uint32_t AnyEvents() const;
  void WaitForAnyEvent(uint32_t seen, absl::Duration limit, bool streaming) const;
  void WakeAnyEventWaiter() const;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // The segment's layout (shm_transport.cc).
  struct Header;
  struct Slot;
  struct Channel;

 private:
  ShmTransport(void* base, int world, int rank) : base_(static_cast<uint8_t*>(base)), world_(world), rank_(rank) {}

  Header& header() const;
  Channel& channel(int src, int dst) const;
  uint8_t* ring(int src, int dst, int ring) const;
  // Rings `bell` and `rank`'s any-event bell.
  void Ring(Doorbell& bell, int rank) const;
  // Rings every bell `rank` may sleep on (an abort).
  void RingAll(int rank) const;
  // Sleeps on `bell` while it still reads `seen` (at most `limit`).
  // `streaming`: a message is under way, so a few yields come first.
  void Sleep(Doorbell& bell, uint32_t seen, absl::Duration limit, bool streaming) const;
  // OK while `peer`'s process lives.
  absl::Status PeerAlive(int peer, const std::string& where) const;

  // Checks the peers and sets a fresh state's progress fields (Start's and
  // Exchange's, which keeps its state on the stack).
  absl::Status Prepare(ExchangeState& st);
  // The bell that every event the transfer now waits for rings.
  Doorbell& BellFor(const ExchangeState& st) const;
  // On failure: marks the transfers' slots so the peers see it, wakes them, and returns `status`.
  absl::Status Fail(const ExchangeState& st, absl::Status status);
  // Claims a free slot of the incoming channel and posts the receive in it.
  void PostReceive(ExchangeState& st);
  // Takes the pieces that have arrived; frees the slot and ring after the last.
  absl::Status DrainReceive(ExchangeState& st);
  // Claims the oldest receive posted with the key on the outgoing channel.
  absl::Status MatchSend(ExchangeState& st);
  // Takes a free ring of the outgoing channel for the send.
  void TakeRing(ExchangeState& st);
  // Writes pieces into the ring while it has room.
  absl::Status StreamSend(ExchangeState& st);

  uint8_t* base_;
  int world_;
  int rank_;
};

}  // namespace nereid

#endif  // NEREID_COMM_SHM_TRANSPORT_H_
