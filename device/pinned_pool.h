#ifndef NEREID_DEVICE_PINNED_POOL_H_
#define NEREID_DEVICE_PINNED_POOL_H_

// Page-locked (pinned) host memory for the copies between host and device,
// kept for reuse: on CUDA a copy from or to pageable memory is staged by the
// driver, and one to pageable memory returns only when it is done (the host
// waits for the stream), while a copy to or from pinned memory is queued
// and runs on the copy engine, beside the kernels. Pinning is slow
// (cudaHostAlloc maps the pages), so blocks are kept and handed out again.
//
// Blocks come in power-of-two sizes from 4 KiB; a request takes a free block
// of its size class or pins a new one. Acquire hands a block out as a
// shared_ptr whose last copy puts it back (no call into the device: it may
// go from a stream's host callback). The pool must outlive its blocks; its
// destructor gives back the free ones. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace nereid {

struct PinnedPoolStats {
  int64_t acquired = 0;     // blocks handed out
  int64_t reused = 0;       // of them, taken from the pool (not pinned anew)
  int64_t pinned_bytes = 0; // held from the device, in use or free
  int64_t in_use = 0;       // blocks out now
};

class PinnedPool {
 public:
  explicit PinnedPool(Device* device) : device_(device) {}
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A pinned block of at least `bytes` (> 0).
  absl::StatusOr<std::shared_ptr<void>> Acquire(size_t bytes);
  PinnedPoolStats stats() const;

 private:
  static size_t SizeClass(size_t bytes);
  void Return(void* ptr, size_t size);

  Device* const device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // by size class; guarded by mu_
  PinnedPoolStats stats_;                      // guarded by mu_
};

}  // namespace nereid

#endif  // NEREID_DEVICE_PINNED_POOL_H_
