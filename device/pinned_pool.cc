#include "device/pinned_pool.h"

#include <utility>

namespace nereid {

PinnedPool::~PinnedPool() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_) {
    for (void* ptr : blocks) device_->FreeHostPinned(ptr).IgnoreError();  // nothing to report it to
  }
}

size_t PinnedPool::SizeClass(size_t bytes) {
  size_t size = 4096;
  while (size < bytes) size *= 2;
  return size;
}

absl::StatusOr<std::shared_ptr<void>> PinnedPool::Acquire(size_t bytes) {
  const size_t size = SizeClass(bytes);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.acquired;
    ++stats_.in_use;
    std::vector<void*>& blocks = free_[size];
    if (!blocks.empty()) {
      ptr = blocks.back();
      blocks.pop_back();
      ++stats_.reused;
    }
  }
  if (ptr == nullptr) {
    absl::StatusOr<void*> pinned = device_->AllocateHostPinned(size);
    std::lock_guard<std::mutex> lock(mu_);
    if (!pinned.ok()) {
      --stats_.in_use;
      return pinned.status();
    }
    ptr = *pinned;
    stats_.pinned_bytes += static_cast<int64_t>(size);
  }
  return std::shared_ptr<void>(ptr, [this, size](void* p) { Return(p, size); });
}

void PinnedPool::Return(void* ptr, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[size].push_back(ptr);
  --stats_.in_use;
}

PinnedPoolStats PinnedPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace nereid
