#include "core/buffer_pool.h"

#include <algorithm>
#include <cstdlib>

namespace nereid {

BufferPool& BufferPool::Global() {
  static BufferPool* pool = new BufferPool();  // never destroyed: tensors may outlive main's locals
  return *pool;
}

BufferPool::~BufferPool() { Trim(); }

std::shared_ptr<void> BufferPool::Allocate(size_t bytes) {
  size_t rounded = std::max<size_t>(kTensorAlignment, (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    auto it = free_.find(rounded);
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= static_cast<int64_t>(rounded);
      ++stats_.reuses;
    }
    if (ptr != nullptr) {
      stats_.bytes_in_use += static_cast<int64_t>(rounded);
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    }
  }
  if (ptr == nullptr) {
    ptr = std::aligned_alloc(kTensorAlignment, rounded);
    if (ptr == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use += static_cast<int64_t>(rounded);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }
  return std::shared_ptr<void>(ptr, [this, rounded](void* p) { Release(p, rounded); });
}

void BufferPool::Release(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_in_use -= static_cast<int64_t>(bytes);
  stats_.bytes_cached += static_cast<int64_t>(bytes);
  free_[bytes].push_back(ptr);
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BufferPool::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void BufferPool::Trim() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [bytes, ptrs] : free_) {
    for (void* p : ptrs) std::free(p);
  }
  free_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace nereid
