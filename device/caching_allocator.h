#ifndef NEREID_DEVICE_CACHING_ALLOCATOR_H_
#define NEREID_DEVICE_CACHING_ALLOCATOR_H_

// A stream-ordered caching allocator over a Device: device memory is slow to
// get (cudaMalloc synchronises) and slower to give back (so does cudaFree),
// so freed blocks are kept and handed out again. PyTorch's CUDA caching
// allocator, simplified. The rule that makes reuse safe without waiting:
//
//   * A block belongs to the stream it was allocated for. Free puts it back
//     in that stream's cache at once: any later work on the stream runs
//     after the work already queued that used the block, so the next owner
//     cannot overtake the previous one.
//   * A block also used on other streams must be declared with RecordUse
//     (PyTorch's record_stream). On Free an event is recorded on each of
//     those streams, and the block returns to the cache only once all of
//     them have completed; until then the memory is reserved, not reusable.
//     A use whose event reports a failure keeps its block out for good.
//   * Only the block's own stream takes it from the cache.
//
// Memory comes from the device in segments, one per request the cache could
// not serve, of that request's size. Sizes round up to 512 bytes. A request
// takes the smallest cached block of its stream that fits (best fit) and
// splits off the rest as a cached block of its own; a block freed next to a
// cached block of the same segment merges with it, so a segment cut up by
// small requests serves a large one again once they are freed. EmptyCache
// gives back the segments that are wholly cached.
//
// When the device is out of memory, every wholly cached segment goes back
// and the request is tried once more (PyTorch's rule); if it fails again, the
// error says how much the allocator held. So a step whose blocks in use fit
// the device runs even where the cache would have kept more.
//
// Thread-safe (one mutex), but not to be called from work on a stream:
// EmptyCache frees through the device, which waits for its streams. The
// allocator must be destroyed before its device, and a stream must outlive
// the blocks allocated for it (call EmptyCache before destroying a stream).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"

namespace nereid {

struct DeviceBlock {
  void* ptr = nullptr;
  size_t size = 0;  // the block's size: the request rounded up, or more on a cache hit
  Stream* stream = nullptr;
};

struct AllocatorStats {
  int64_t bytes_in_use = 0;         // in blocks handed out and not freed
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_reserved = 0;       // got from the device and not given back: in use, cached or held back
  int64_t peak_bytes_reserved = 0;
  int64_t allocations = 0;          // successful Allocate calls
  int64_t cache_hits = 0;           // of which served from the cache
  int64_t segments_released = 0;    // given back to the device (out of memory, EmptyCache)
  double fragmentation = 0;         // 1 - in_use / reserved (0 when nothing is reserved)
};

class CachingAllocator {
 public:
  static constexpr size_t kGranularity = 512;
  // Requests up to kSmallSize come from segments of kSmallSegment, apart
  // from the large requests' segments, so that small blocks never fragment
  // the memory large ones need.
  static constexpr size_t kSmallSize = size_t{1} << 20;
  static constexpr size_t kSmallSegment = size_t{2} << 20;

  // `device` must outlive the allocator.
  explicit CachingAllocator(Device* device);
  // Gives cached and held-back blocks back to the device (waiting for the
  // latter's events); blocks still in use are left alone.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 counts as 1) for work on `stream`.
  absl::StatusOr<DeviceBlock> Allocate(size_t bytes, Stream* stream);
  // Back to its stream's cache, or held back until its other streams' uses
  // complete. A block that is not live here is InvalidArgument.
  absl::Status Free(const DeviceBlock& block);
  // Declares that work on `other` uses `block` (see the rule above).
  absl::Status RecordUse(const DeviceBlock& block, Stream* other);
  // Gives every cached block back to the device; held-back blocks whose
  // uses have completed first join the cache.
  absl::Status EmptyCache();

  AllocatorStats stats() const;

  // `bytes` rounded up to kGranularity (at least one granule).
  static absl::StatusOr<size_t> RoundSize(size_t bytes);

 private:
  // A piece of a segment: in use, cached, or held back for other streams' uses.
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    Stream* stream = nullptr;
    bool small = false;  // of the small pool
    enum State { kInUse, kCached, kHeld } state = kCached;
    Block* prev = nullptr;  // the neighbours in its segment, by address
    Block* next = nullptr;
    std::vector<Stream*> uses;                   // in use: other streams, each once
    std::vector<std::unique_ptr<Event>> events;  // held: one per other stream
  };

  // The smallest cached block of (stream, pool) of at least `size`, taken
  // out of the cache; nullptr if none.
  Block* TakeCachedLocked(Stream* stream, bool small, size_t size);
  // Every wholly cached segment, of any stream, removed from the books; the
  // caller gives them to ReleaseSegments after unlocking.
  std::vector<std::pair<void*, size_t>> TakeWholeSegmentsLocked();
  // Frees segments through the device (which waits for its streams: never
  // with mu_ held) and takes them off the reservation; the first error.
  absl::Status ReleaseSegments(const std::vector<std::pair<void*, size_t>>& segments);
  // Moves held-back blocks whose events have all completed to the cache.
  void CollectHeldLocked();
  // `block` joins its stream's cache, merged with cached neighbours.
  void CacheLocked(Block* block);
  absl::StatusOr<std::unique_ptr<Event>> TakeEventLocked();

  Device* const device_;
  mutable std::mutex mu_;
  // All guarded by mu_.
  std::map<char*, Block> blocks_;                               // every block, by address
  // Cached blocks per (stream, small pool), by size.
  std::map<std::pair<Stream*, bool>, std::set<std::pair<size_t, char*>>> cache_;
  std::vector<Block*> held_;
  std::vector<std::unique_ptr<Event>> spare_events_;
  AllocatorStats stats_;
};

}  // namespace nereid

#endif  // NEREID_DEVICE_CACHING_ALLOCATOR_H_
