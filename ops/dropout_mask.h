#ifndef NEREID_OPS_DROPOUT_MASK_H_
#define NEREID_OPS_DROPOUT_MASK_H_

// Dropout's mask, a pure function of (seed, step, element index) through a
// counter-based hash: the CPU kernel and the GPU kernel (whose device side,
// gpu_math.cu, repeats Mix) draw the same masks, and a backward pass or a
// resumed run redraws them without storing them.

#include <cstdint>

namespace nereid {

// SplitMix64's finaliser: a good 64-bit mix of a counter.
inline uint64_t DropoutMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The step's stream: element i is kept when DropoutMix(stream + i) >> 40,
// the top 24 bits, is at least DropoutThreshold(rate).
inline uint64_t DropoutStream(uint64_t seed, int64_t step) {
  return DropoutMix(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(step));
}
inline uint64_t DropoutThreshold(float rate) { return static_cast<uint64_t>(static_cast<double>(rate) * (1 << 24)); }

}  // namespace nereid

#endif  // NEREID_OPS_DROPOUT_MASK_H_
