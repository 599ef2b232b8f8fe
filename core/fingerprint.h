#ifndef NEREID_CORE_FINGERPRINT_H_
#define NEREID_CORE_FINGERPRINT_H_

// FNV-1a, 64 bit: checkpoint checksums, plan and parameter fingerprints.
// `seed` chains calls: Fnv1a(b, Fnv1a(a)) == Fnv1a(a + b).

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace nereid {

inline constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

inline uint64_t Fnv1a(const void* data, size_t size, uint64_t seed = kFnv1aOffset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline uint64_t Fnv1a(absl::string_view data, uint64_t seed = kFnv1aOffset) {
  return Fnv1a(data.data(), data.size(), seed);
}

}  // namespace nereid

#endif  // NEREID_CORE_FINGERPRINT_H_
