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
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (HeldBlock& held : held_) {
      // A failed use's event reports its error here; the work is over either way.
      for (auto& event : held.events) event->Synchronize().IgnoreError();
      blocks.push_back(held.ptr);
    }
    for (auto& [stream, cache] : cache_) {
      for (auto& [size, ptr] : cache) blocks.push_back(ptr);
    }
    held_.clear();
    cache_.clear();
  }
  // Errors (a guard the sim found overwritten) have no one to go to here.
  for (void* ptr : blocks) device_->FreeRaw(ptr).IgnoreError();
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
  std::lock_guard<std::mutex> lock(mu_);
  CollectHeldLocked();
  DeviceBlock block{nullptr, 0, stream};
  auto& cache = cache_[stream];
  auto best = cache.lower_bound(size);
  if (best != cache.end() && best->first / 2 < size) {
    block.ptr = best->second;
    block.size = best->first;
    cache.erase(best);
    ++stats_.cache_hits;
  } else {
    // Allocating with the lock held keeps the stats exact; the device never
    // calls back into the allocator.
    ASSIGN_OR_RETURN(block.ptr, device_->AllocateRaw(size));
    block.size = size;
    stats_.bytes_reserved += static_cast<int64_t>(size);
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  }
  live_[block.ptr] = LiveBlock{block.size, stream, {}};
  stats_.bytes_in_use += static_cast<int64_t>(block.size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.allocations;
  return block;
}

absl::Status CachingAllocator::Free(const DeviceBlock& block) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(block.ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CachingAllocator::Free: %p is not a live block (freed twice, or not from this allocator)",
                        block.ptr));
  }
  LiveBlock live = std::move(it->second);
  live_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(live.size);
  if (live.uses.empty()) {
    cache_[live.stream].emplace(live.size, block.ptr);
    return absl::OkStatus();
  }
  HeldBlock held{block.ptr, live.size, live.stream, {}};
  for (Stream* other : live.uses) {
    absl::StatusOr<std::unique_ptr<Event>> event = TakeEventLocked();
    absl::Status status = event.status();
    if (status.ok()) status = other->Record(**event);
    if (!status.ok()) {
      // Without a fence on `other` the block can never be known free: it
      // stays reserved and is never reused.
      return absl::Status(status.code(), absl::StrFormat("CachingAllocator::Free: block %p used on %s is kept out of "
                                                         "use: cannot fence that use: %s",
                                                         block.ptr, other->name(), status.message()));
    }
    held.events.push_back(*std::move(event));
  }
  held_.push_back(std::move(held));
  return absl::OkStatus();
}

absl::Status CachingAllocator::RecordUse(const DeviceBlock& block, Stream* other) {
  if (other == nullptr) return absl::InvalidArgumentError("CachingAllocator::RecordUse: no stream");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(block.ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CachingAllocator::RecordUse: %p is not a live block", block.ptr));
  }
  LiveBlock& live = it->second;
  if (other != live.stream && std::find(live.uses.begin(), live.uses.end(), other) == live.uses.end()) {
    live.uses.push_back(other);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::EmptyCache() {
  std::vector<std::pair<void*, size_t>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CollectHeldLocked();
    for (auto& [stream, cache] : cache_) {
      for (auto& [size, ptr] : cache) blocks.emplace_back(ptr, size);
    }
    cache_.clear();
  }
  // Freed unlocked: the device waits for its streams, which may take long.
  absl::Status first;
  for (const auto& [ptr, size] : blocks) {
    absl::Status status = device_->FreeRaw(ptr);
    if (first.ok()) first = status;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_reserved -= static_cast<int64_t>(size);
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

void CachingAllocator::CollectHeldLocked() {
  auto done = [](HeldBlock& held) {
    for (auto& event : held.events) {
      absl::StatusOr<bool> complete = event->Query();
      // An error: the use failed, and the block stays held (see the header).
      if (!complete.ok() || !*complete) return false;
    }
    return true;
  };
  auto keep = std::partition(held_.begin(), held_.end(), [&](HeldBlock& held) { return !done(held); });
  for (auto it = keep; it != held_.end(); ++it) {
    cache_[it->stream].emplace(it->size, it->ptr);
    for (auto& event : it->events) spare_events_.push_back(std::move(event));
  }
  held_.erase(keep, held_.end());
}

absl::StatusOr<std::unique_ptr<Event>> CachingAllocator::TakeEventLocked() {
  if (spare_events_.empty()) return device_->CreateEvent();
  std::unique_ptr<Event> event = std::move(spare_events_.back());
  spare_events_.pop_back();
  return event;
}

}  // namespace nereid
