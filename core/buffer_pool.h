#ifndef NEREID_CORE_BUFFER_POOL_H_
#define NEREID_CORE_BUFFER_POOL_H_

// Aligned tensor memory with reuse. Training allocates the same sizes every
// iteration, so freed buffers go onto a free list keyed by their exact size
// and the next request of that size takes one back instead of calling the
// allocator. The pool counts bytes held by live tensors and its peak, which is
// the figure `nereid run` reports as peak tensor memory.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace nereid {

// Every buffer starts on a 64-byte boundary: a cache line, and what AVX-512
// loads and oneDNN prefer.
inline constexpr size_t kTensorAlignment = 64;

class BufferPool {
 public:
  static BufferPool& Global();

  BufferPool() = default;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool();

  // A buffer of at least `bytes` (rounded up to the alignment), returned to
  // the pool when the last reference goes. Null only if the system is out of
  // memory.
  std::shared_ptr<void> Allocate(size_t bytes);

  struct Stats {
    int64_t bytes_in_use = 0;       // held by live buffers
    int64_t peak_bytes_in_use = 0;  // the most ever held at once
    int64_t bytes_cached = 0;       // free, kept for reuse
    int64_t allocations = 0;        // requests served
    int64_t reuses = 0;             // of which from the free lists
  };
  Stats stats() const;
  // Starts peak tracking afresh (at the current use).
  void ResetPeak();
  // Returns cached free buffers to the system.
  void Trim();

 private:
  void Release(void* ptr, size_t bytes);

  mutable std::mutex mu_;
  absl::flat_hash_map<size_t, std::vector<void*>> free_;
  Stats stats_;
};

}  // namespace nereid

#endif  // NEREID_CORE_BUFFER_POOL_H_
