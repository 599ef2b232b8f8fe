#ifndef NEREID_DEVICE_SIM_MEMORY_H_
#define NEREID_DEVICE_SIM_MEMORY_H_

// The simulated device's memory: blocks of host memory made to behave like
// memory the host must not use directly, so that misuse shows up on any
// machine instead of passing by luck:
//
//   * every byte of a fresh block, and of a block being freed, holds the
//     poison word 0x7FC0DEAD (little-endian; a quiet NaN as float32), so a
//     kernel that reads memory nobody wrote computes NaN;
//   * guard bytes on both sides of each block are checked when it is freed:
//     an overrun or underrun is an error naming the block, not a crash;
//   * freeing a pointer that is not the start of a live block (a double
//     free, a host pointer, an interior pointer) is an error;
//   * a copy can ask whether a range lies inside one live block (device
//     memory) or touches none (host memory), and so catch a swapped direction.
//
// Thread-safe.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nereid {

inline constexpr uint32_t kSimPoisonWord = 0x7FC0DEAD;
// At least this many guard bytes follow each block (more when padding to
// the alignment), and exactly this many precede it, which keeps the block's
// start aligned like cudaMalloc's.
inline constexpr size_t kSimGuardBytes = 256;
inline constexpr unsigned char kSimGuardByte = 0xFD;

class SimMemory {
 public:
  // `device_name` prefixes every error; `capacity` bytes in all may be live
  // at once (0: no bound but the host's).
  explicit SimMemory(std::string device_name, int64_t capacity = 0);
  // Frees the blocks still live.
  ~SimMemory();
  SimMemory(const SimMemory&) = delete;
  SimMemory& operator=(const SimMemory&) = delete;

  // A poisoned block of `bytes` (0 allowed: a distinct pointer), aligned to
  // kSimGuardBytes.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // Checks the guards (DataLoss naming the block and the first bad byte),
  // poisons the block and releases it; it is released even when the guards
  // were overwritten. `what` names the caller in errors ("FreeRaw").
  absl::Status Free(void* ptr, const char* what);

  // OK when [ptr, ptr + bytes) lies inside one live block; otherwise
  // InvalidArgument starting with `what` ("destination"): the caller adds
  // where it was.
  absl::Status CheckDeviceRange(const void* ptr, size_t bytes, const char* what) const;
  // OK when [ptr, ptr + bytes) touches no live block or its guards.
  absl::Status CheckHostRange(const void* ptr, size_t bytes, const char* what) const;

  size_t live_blocks() const;

 private:
  struct Block {
    uint64_t id = 0;
    size_t size = 0;              // as asked
    size_t total = 0;             // with guards and padding
    unsigned char* base = nullptr;  // the front guard's first byte
  };
  std::string Describe(uintptr_t start, const Block& block) const;
  // The block holding `address` (guards included), or blocks_.end().
  std::map<uintptr_t, Block>::const_iterator Holding(uintptr_t address) const;

  const std::string device_name_;
  const int64_t capacity_;
  mutable std::mutex mu_;
  int64_t live_bytes_ = 0;             // as asked, over the live blocks; guarded by mu_
  std::map<uintptr_t, Block> blocks_;  // by the block's first byte; guarded by mu_
  uint64_t next_id_ = 1;               // guarded by mu_
};

}  // namespace nereid

#endif  // NEREID_DEVICE_SIM_MEMORY_H_
