#ifndef NEREID_COMPRESS_STICKY_WORD_H_
#define NEREID_COMPRESS_STICKY_WORD_H_

// A word of device state the host reads back to size a step, which, once
// non-zero, stays so for the rest of a run: GradiVeQ's basis (non-zero or
// not: exact steps or compressed ones), a low-rank push's edge (started or
// not: the first push is exact). The GPU kernels read it (a wait on the GPU)
// only while the last read said zero, or at a step not after the last read
// (state restored), so a run waits for it a few times, not every step.

#include <cstdint>

namespace nereid::codes {

struct StickyWord {
  int64_t step = -1;  // the step of the last read; -1: none yet
  uint32_t word = 0;  // what it said

  // Whether step `at` must read the word again to know it.
  bool NeedsRead(int64_t at) const { return !(word != 0 && step >= 0 && step < at); }
  void Read(int64_t at, uint32_t value) { step = at, word = value; }
};

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_STICKY_WORD_H_
