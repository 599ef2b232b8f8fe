#include "device/caching_allocator.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace nereid {

CachingAllocator::CachingAllocator(Device* device) : device_(device) {}

CachingAllocator::~CachingAllocator() {
  std::vector<void*> segments;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A failed use's event reports its error here; the work is over either way.
    for (Block* held : held_) {
      for (auto& event : held->events) event->Synchronize().IgnoreError();
    }
    // Segments with no block in use go back; one still in use is left alone.
    for (auto& [ptr, block] : blocks_) {
      if (block.prev != nullptr) continue;
      bool free = true;
      for (const Block* b = &block; b != nullptr && free; b = b->next) free = b->state != Block::kInUse;
      if (free) segments.push_back(ptr);
    }
  }
  // Errors (a guard the sim found overwritten) have no one to go to here.
  for (void* ptr : segments) device_->FreeRaw(ptr).IgnoreError();
}

absl::StatusOr<size_t> CachingAllocator::RoundSize(size_t bytes) {
  if (bytes > std::numeric_limits<size_t>::max() - kGranularity) {
    return absl::InvalidArgumentError(absl::StrCat("CachingAllocator: ", bytes, " bytes is too large"));
  }
  return std::max<size_t>(1, (bytes + kGranularity - 1) / kGranularity) * kGranularity;
}

absl::StatusOr<DeviceBlock> CachingAllocator::Allocate(size_t bytes, Stream* stream) {
  if (stream == nullptr) return absl::InvalidArgumentError("CachingAllocator::Allocate: no stream");
  ASSIGN_OR_RETURN(const size_t size, RoundSize(bytes));
  const bool small = size <= kSmallSize;
  const size_t segment = small ? kSmallSegment : size;
  std::unique_lock<std::mutex> lock(mu_);
  Block* block = nullptr;
  bool released = false;
  while (block == nullptr) {
    CollectHeldLocked();
    block = TakeCachedLocked(stream, small, size);
    if (block != nullptr) {
      ++stats_.cache_hits;
      break;
    }
    // Allocating with the lock held keeps the stats exact; the device never
    // calls back into the allocator.
    absl::StatusOr<void*> raw = device_->AllocateRaw(segment);
    // Out of device memory: the cache goes back and the request is tried
    // once more (other threads may free blocks meanwhile).
    if (absl::IsResourceExhausted(raw.status()) && !released) {
      released = true;
      std::vector<std::pair<void*, size_t>> segments = TakeWholeSegmentsLocked();
      if (!segments.empty()) {
        lock.unlock();
        RETURN_IF_ERROR(ReleaseSegments(segments));
        lock.lock();
        continue;
      }
    }
    if (!raw.ok()) {
      return absl::Status(raw.status().code(),
                          absl::StrCat(raw.status().message(), " (the caching allocator holds ", stats_.bytes_in_use,
                                       " bytes in use of ", stats_.bytes_reserved, " reserved, its cache given back)"));
    }
    char* ptr = static_cast<char*>(*raw);
    block = &blocks_[ptr];
    *block = Block{ptr, segment, stream, small, Block::kCached, nullptr, nullptr, {}, {}};
    stats_.bytes_reserved += static_cast<int64_t>(segment);
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  }
  auto& cache = cache_[{stream, small}];
  // The rest stays cached, as a block of its own in the same segment: any
  // rest of a small block, a large block's only when it is large itself (a
  // large segment cut into slivers would serve no large request again).
  if (block->size - size >= (small ? kGranularity : kSmallSize + 1)) {
    Block& rest = blocks_[block->ptr + size];
    rest = Block{block->ptr + size, block->size - size, stream, small, Block::kCached, block, block->next, {}, {}};
    if (block->next != nullptr) block->next->prev = &rest;
    block->next = &rest;
    block->size = size;
    cache.emplace(rest.size, rest.ptr);
  }
  block->state = Block::kInUse;
  block->uses.clear();
  stats_.bytes_in_use += static_cast<int64_t>(block->size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.allocations;
  return DeviceBlock{block->ptr, block->size, stream};
}

absl::Status CachingAllocator::Free(const DeviceBlock& freed) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(static_cast<char*>(freed.ptr));
  if (it == blocks_.end() || it->second.state != Block::kInUse) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CachingAllocator::Free: %p is not a live block (freed twice, or not from this allocator)",
                        freed.ptr));
  }
  Block* block = &it->second;
  stats_.bytes_in_use -= static_cast<int64_t>(block->size);
  if (block->uses.empty()) {
    CacheLocked(block);
    return absl::OkStatus();
  }
  block->state = Block::kHeld;
  for (Stream* other : block->uses) {
    absl::StatusOr<std::unique_ptr<Event>> event = TakeEventLocked();
    absl::Status status = event.status();
    if (status.ok()) status = other->Record(**event);
    if (!status.ok()) {
      // Without a fence on `other` the block can never be known free: it
      // stays reserved and is never reused.
      block->events.clear();
      return absl::Status(status.code(), absl::StrFormat("CachingAllocator::Free: block %p used on %s is kept out of "
                                                         "use: cannot fence that use: %s",
                                                         freed.ptr, other->name(), status.message()));
    }
    block->events.push_back(*std::move(event));
  }
  block->uses.clear();
  held_.push_back(block);
  return absl::OkStatus();
}

absl::Status CachingAllocator::RecordUse(const DeviceBlock& used, Stream* other) {
  if (other == nullptr) return absl::InvalidArgumentError("CachingAllocator::RecordUse: no stream");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(static_cast<char*>(used.ptr));
  if (it == blocks_.end() || it->second.state != Block::kInUse) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CachingAllocator::RecordUse: %p is not a live block", used.ptr));
  }
  Block& block = it->second;
  if (other != block.stream && std::find(block.uses.begin(), block.uses.end(), other) == block.uses.end()) {
    block.uses.push_back(other);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::EmptyCache() {
  std::vector<std::pair<void*, size_t>> segments;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CollectHeldLocked();
    segments = TakeWholeSegmentsLocked();
  }
  return ReleaseSegments(segments);
}

CachingAllocator::Block* CachingAllocator::TakeCachedLocked(Stream* stream, bool small, size_t size) {
  auto& cache = cache_[{stream, small}];
  auto best = cache.lower_bound({size, nullptr});
  if (best == cache.end()) return nullptr;
  Block* block = &blocks_.at(best->second);
  cache.erase(best);
  return block;
}

std::vector<std::pair<void*, size_t>> CachingAllocator::TakeWholeSegmentsLocked() {
  std::vector<std::pair<void*, size_t>> taken;
  for (auto& [stream, cache] : cache_) {
    for (auto it = cache.begin(); it != cache.end();) {
      Block& block = blocks_.at(it->second);
      // A cached block with no neighbours is a whole segment.
      if (block.prev != nullptr || block.next != nullptr) {
        ++it;
        continue;
      }
      taken.emplace_back(block.ptr, block.size);
      blocks_.erase(block.ptr);
      it = cache.erase(it);
    }
  }
  return taken;
}

absl::Status CachingAllocator::ReleaseSegments(const std::vector<std::pair<void*, size_t>>& segments) {
  // Freed unlocked: the device waits for its streams, which may take long.
  absl::Status first;
  for (const auto& [ptr, size] : segments) {
    absl::Status status = device_->FreeRaw(ptr);
    if (first.ok()) first = status;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_reserved -= static_cast<int64_t>(size);
    ++stats_.segments_released;
  }
  return first;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats stats = stats_;
  stats.fragmentation =
      stats.bytes_reserved > 0 ? 1.0 - static_cast<double>(stats.bytes_in_use) / stats.bytes_reserved : 0.0;
  return stats;
}

void CachingAllocator::CacheLocked(Block* block) {
  auto& cache = cache_[{block->stream, block->small}];
  block->state = Block::kCached;
  // Absorbs a cached right neighbour, then is absorbed by a cached left one.
  if (Block* next = block->next; next != nullptr && next->state == Block::kCached) {
    cache.erase({next->size, next->ptr});
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    blocks_.erase(next->ptr);
  }
  if (Block* prev = block->prev; prev != nullptr && prev->state == Block::kCached) {
    cache.erase({prev->size, prev->ptr});
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    blocks_.erase(block->ptr);
    block = prev;
  }
  cache.emplace(block->size, block->ptr);
}

void CachingAllocator::CollectHeldLocked() {
  auto done = [](const Block* held) {
    for (const auto& event : held->events) {
      absl::StatusOr<bool> complete = event->Query();
      // An error: the use failed, and the block stays held (see the header).
      if (!complete.ok() || !*complete) return false;
    }
    return !held->events.empty();
  };
  auto keep = std::partition(held_.begin(), held_.end(), [&](const Block* held) { return !done(held); });
  std::vector<Block*> released(keep, held_.end());
  held_.erase(keep, held_.end());
  for (Block* block : released) {
    for (auto& event : block->events) spare_events_.push_back(std::move(event));
    block->events.clear();
    CacheLocked(block);
  }
}

absl::StatusOr<std::unique_ptr<Event>> CachingAllocator::TakeEventLocked() {
  if (spare_events_.empty()) return device_->CreateEvent();
  std::unique_ptr<Event> event = std::move(spare_events_.back());
  spare_events_.pop_back();
  return event;
}

}  // namespace nereid
