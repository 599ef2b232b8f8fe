#ifndef NEREID_COMPRESS_BIT_STREAM_H_
#define NEREID_COMPRESS_BIT_STREAM_H_

// Variable-length bit streams inside a code's float-sized words, least
// significant bit first, with Elias gamma codes for positive integers: the
// entropy coding of QSGD's levels, where small levels dominate.

#include <cstdint>
#include <cstring>

#include "absl/types/span.h"

namespace nereid {

class BitWriter {
 public:
  explicit BitWriter(absl::Span<float> words) : words_(words) {}

  // Appends the low `count` (<= 32) bits of `bits`, which must be all it has.
  // The caller sizes `words` for the longest code it can write.
  void Put(uint64_t bits, int count) {
    pending_ |= bits << filled_;
    filled_ += count;
    if (filled_ >= 32) {
      Store(static_cast<uint32_t>(pending_));
      pending_ >>= 32;
      filled_ -= 32;
    }
  }
  // Elias gamma of v >= 1, as Put's (bits, count): floor(log2 v) zeros, a
  // one, then the bits of v below its top one. 1 -> "1", 2 -> "010" read
  // from the first bit.
  static int GammaCount(uint32_t v) { return 2 * Log2(v) + 1; }
  static uint64_t GammaBits(uint32_t v) {
    const int n = Log2(v);
    return (uint64_t{1} << n) | (static_cast<uint64_t>(v & ((1u << n) - 1)) << (n + 1));
  }
  // Flushes the last partial word; returns the words written.
  int64_t Finish() {
    if (filled_ > 0) Store(static_cast<uint32_t>(pending_));
    pending_ = 0;
    filled_ = 0;
    return next_;
  }

 private:
  static int Log2(uint32_t v) { return 31 - __builtin_clz(v); }
  void Store(uint32_t word) { std::memcpy(&words_[next_++], &word, sizeof(word)); }

  absl::Span<float> words_;
  uint64_t pending_ = 0;
  int filled_ = 0;
  int64_t next_ = 0;
};

// Reads what BitWriter wrote; past the end it reads zeros.
class BitReader {
 public:
  explicit BitReader(absl::Span<const float> words) : words_(words) {}

  uint32_t Get(int count) {  // count <= 32
    Refill();
    const uint32_t v = static_cast<uint32_t>(pending_ & ((uint64_t{1} << count) - 1));
    pending_ >>= count;
    filled_ -= count;
    return v;
  }
  uint32_t GetGamma() {
    Refill();
    // A valid stream has a one within the next 32 bits; zeros past the end
    // (a truncated or foreign code) read as 1 rather than shift by 64.
    if ((pending_ & 0xffffffffu) == 0) {
      pending_ >>= 1;
      filled_ -= 1;
      return 1;
    }
    const int n = __builtin_ctzll(pending_);
    pending_ >>= n + 1;
    filled_ -= n + 1;
    return (1u << n) | Get(n);
  }

 private:
  void Refill() {
    while (filled_ <= 32) {
      uint32_t word = 0;
      if (next_ < words_.size()) std::memcpy(&word, &words_[next_], sizeof(word));
      ++next_;
      pending_ |= static_cast<uint64_t>(word) << filled_;
      filled_ += 32;
    }
  }

  absl::Span<const float> words_;
  uint64_t pending_ = 0;
  int filled_ = 0;
  size_t next_ = 0;
};

}  // namespace nereid

#endif  // NEREID_COMPRESS_BIT_STREAM_H_
