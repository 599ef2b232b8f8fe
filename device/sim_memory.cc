#include "device/sim_memory.h"

#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nereid {
namespace {

void Poison(unsigned char* bytes, size_t n) {
  unsigned char word[sizeof(kSimPoisonWord)];
  for (size_t i = 0; i < sizeof(word); ++i) word[i] = static_cast<unsigned char>(kSimPoisonWord >> (8 * i));
  for (size_t i = 0; i < n; ++i) bytes[i] = word[i % sizeof(word)];
}

// Index of the first byte in [bytes, bytes + n) that is not the guard byte,
// or n; and how many are not.
std::pair<size_t, size_t> BadGuardBytes(const unsigned char* bytes, size_t n) {
  size_t first = n, count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] != kSimGuardByte) {
      if (first == n) first = i;
      ++count;
    }
  }
  return {first, count};
}

}  // namespace

SimMemory::SimMemory(std::string device_name, int64_t capacity)
    : device_name_(std::move(device_name)), capacity_(capacity) {}

SimMemory::~SimMemory() {
  for (auto& [start, block] : blocks_) ::operator delete(block.base, std::align_val_t(kSimGuardBytes));
}

absl::StatusOr<void*> SimMemory::Allocate(size_t bytes) {
  // Front guard, the block, then at least a guard's worth up to a multiple
  // of the alignment (aligned new wants whole multiples on some libcs).
  if (bytes > (size_t{1} << 48)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(device_name_, ": AllocateRaw: ", bytes, " bytes is more than the simulator gives"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capacity_ > 0 && live_bytes_ + static_cast<int64_t>(bytes) > capacity_) {
      return absl::ResourceExhaustedError(absl::StrCat(device_name_, ": AllocateRaw: out of memory: ", bytes,
                                                       " bytes asked with ", live_bytes_, " of the device's ",
                                                       capacity_, " in use"));
    }
    live_bytes_ += static_cast<int64_t>(bytes);  // claimed now, so that two callers cannot both pass
  }
  const size_t total = (kSimGuardBytes + bytes + kSimGuardBytes + kSimGuardBytes - 1) / kSimGuardBytes * kSimGuardBytes;
  auto* base = static_cast<unsigned char*>(::operator new(total, std::align_val_t(kSimGuardBytes), std::nothrow));
  if (base == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    live_bytes_ -= static_cast<int64_t>(bytes);
    return absl::ResourceExhaustedError(
        absl::StrCat(device_name_, ": AllocateRaw: out of host memory for ", bytes, " bytes"));
  }
  std::memset(base, kSimGuardByte, kSimGuardBytes);
  Poison(base + kSimGuardBytes, bytes);
  std::memset(base + kSimGuardBytes + bytes, kSimGuardByte, total - kSimGuardBytes - bytes);
  std::lock_guard<std::mutex> lock(mu_);
  blocks_[reinterpret_cast<uintptr_t>(base)] = Block{next_id_++, bytes, total, base};
  return static_cast<void*>(base + kSimGuardBytes);
}

absl::Status SimMemory::Free(void* ptr, const char* what) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  Block block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = address >= kSimGuardBytes ? blocks_.find(address - kSimGuardBytes) : blocks_.end();
    if (it == blocks_.end()) {
      auto holder = Holding(address);
      if (holder != blocks_.end()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s: %p is not the start of a device block: it lies %d bytes into %s", device_name_, what, ptr,
            static_cast<int64_t>(address - (holder->first + kSimGuardBytes)), Describe(holder->first, holder->second)));
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s: %p is not a live device block (freed twice, or never allocated here)", device_name_, what, ptr));
    }
    block = it->second;
    blocks_.erase(it);
    live_bytes_ -= static_cast<int64_t>(block.size);
  }
  // Checked outside the lock: the block is no longer reachable by others.
  const auto [front_first, front_count] = BadGuardBytes(block.base, kSimGuardBytes);
  const size_t back_size = block.total - kSimGuardBytes - block.size;
  const auto [back_first, back_count] = BadGuardBytes(block.base + kSimGuardBytes + block.size, back_size);
  const std::string name = Describe(reinterpret_cast<uintptr_t>(block.base), block);
  Poison(block.base + kSimGuardBytes, block.size);
  ::operator delete(block.base, std::align_val_t(kSimGuardBytes));

  if (front_count == 0 && back_count == 0) return absl::OkStatus();
  std::string damage;
  if (front_count > 0) {
    absl::StrAppend(&damage, front_count, " guard byte(s) before the block overwritten, the first at offset -",
                    kSimGuardBytes - front_first);
  }
  if (back_count > 0) {
    if (!damage.empty()) damage += "; ";
    absl::StrAppend(&damage, back_count, " guard byte(s) after the block overwritten, the first at offset ",
                    block.size + back_first);
  }
  return absl::DataLossError(absl::StrCat(device_name_, ": ", what, ": ", name, ": ", damage,
                                          " (a write out of the block's bounds; the block is freed)"));
}

absl::Status SimMemory::CheckDeviceRange(const void* ptr, size_t bytes, const char* what) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = Holding(address);
  if (it != blocks_.end()) {
    const uintptr_t start = it->first + kSimGuardBytes;
    if (address >= start && address - start <= it->second.size && bytes <= it->second.size - (address - start)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrFormat("%s: %p + %d bytes runs outside %s", what, ptr, bytes,
                                                      Describe(it->first, it->second)));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %p is not device memory of this device", what, ptr));
}

absl::Status SimMemory::CheckHostRange(const void* ptr, size_t bytes, const char* what) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.lower_bound(address);
  if (it == blocks_.end() || it->first >= address + bytes) {
    if (it == blocks_.begin()) return absl::OkStatus();
    --it;
    if (it->first + it->second.total <= address) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s: %p + %d bytes is device memory (%s), not host memory", what,
                                                    ptr, bytes, Describe(it->first, it->second)));
}

size_t SimMemory::live_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.size();
}

std::string SimMemory::Describe(uintptr_t start, const Block& block) const {
  return absl::StrFormat("device block #%d (%d bytes at %p)", block.id, block.size,
                         reinterpret_cast<const void*>(start + kSimGuardBytes));
}

std::map<uintptr_t, SimMemory::Block>::const_iterator SimMemory::Holding(uintptr_t address) const {
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  return address < it->first + it->second.total ? it : blocks_.end();
}

}  // namespace nereid
