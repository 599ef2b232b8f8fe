#ifndef NEREID_COMPRESS_QSGD_ELIAS_BUCKETS_H_
#define NEREID_COMPRESS_QSGD_ELIAS_BUCKETS_H_

// QSGD's Elias coding one bucket at a time, for the host codec
// (qsgd_codec.cc) and its GPU kernels (ops/cuda/codec_gpu.cu). A code is
//
//   [the floats it uses, a uint32's bits][each bucket's L2 norm][the stream]
//
// and the stream holds each value's field (qsgd_buckets.h: a level and a
// sign) as a word of variable length, least significant bit first: a zero
// level is "0"; any other is "1", the sign, then the Elias gamma code of the
// level (floor(log2 l) zeros, a one, then l's bits below its top one).
//
// A bucket's words depend on its own fields only, so once each bucket's
// bit count is known (and scanned) the buckets can be written at once; two
// buckets may share a stream word, which `or_word` merges. Reading a bucket
// needs its first bit, which only walking the stream before it gives (Skip).

#include <cstdint>
#include <cstring>

#include "compress/bucket_codes.h"
#include "compress/qsgd_buckets.h"

namespace nereid::codes {

struct QsgdElias {
  QsgdBuckets fixed;  // the layout (elements, bucket, bits) and the fields

  NEREID_HD int64_t Buckets() const { return fixed.layout.Buckets(); }
  // The float where the stream starts.
  NEREID_HD int64_t StreamAt() const { return 1 + Buckets(); }

  NEREID_HD static int Log2(uint32_t v) {  // v >= 1
#ifdef __CUDA_ARCH__
    return 31 - __clz(v);
#else
    return 31 - __builtin_clz(v);
#endif
  }
  NEREID_HD static int LowestOne(uint32_t v) {  // v != 0
#ifdef __CUDA_ARCH__
    return __ffs(static_cast<int>(v)) - 1;
#else
    return __builtin_ctz(v);
#endif
  }
  NEREID_HD static int GammaCount(uint32_t v) { return 2 * Log2(v) + 1; }
  // A code's floats when every value takes the top level: the bound.
  NEREID_HD int64_t BoundFloats() const {
    const int64_t most_bits = 2 + GammaCount(static_cast<uint32_t>(fixed.levels()));
    return StreamAt() + (fixed.layout.elements * most_bits + 31) / 32;
  }

  // A field's word: its bits, and their count in `count`.
  NEREID_HD uint64_t Word(uint32_t field, int& count) const {
    const uint32_t level = field & (fixed.sign() - 1);
    if (level == 0) {
      count = 1;
      return 0;
    }
    const int n = Log2(level);
    count = 2 + 2 * n + 1;
    const uint64_t gamma = (uint64_t{1} << n) | (static_cast<uint64_t>(level & ((1u << n) - 1)) << (n + 1));
    return 1 | ((field & fixed.sign()) != 0 ? 2u : 0u) | (gamma << 2);
  }

  // The fields of a bucket of n values whose norm is `norm`, its draws from
  // `draw` on (as the fixed coding's Encode takes them).
  NEREID_HD void Fields(const float* x, int64_t n, float norm, uint64_t seed, uint64_t draw, uint8_t* fields) const {
    const float to_levels = fixed.ToLevels(norm);
    for (int64_t i = 0; i < n; ++i) {
      // bits <= 8: a field fits a byte
      fields[i] = static_cast<uint8_t>(fixed.Field(x[i], norm, to_levels, [&] { return UniformAt(seed, draw++); }));
    }
  }

  // The stream bits of n fields' words.
  NEREID_HD uint64_t Bits(const uint8_t* fields, int64_t n) const {
    uint64_t bits = 0;
    for (int64_t i = 0; i < n; ++i) {
      int count;
      Word(fields[i], count);
      bits += static_cast<uint64_t>(count);
    }
    return bits;
  }

  // Writes n fields' words from stream bit `at`; or_word(k, bits) ORs into
  // stream word k (zero before the first bucket's write). Returns the bit
  // after them.
  template <typename OrWord>
  NEREID_HD uint64_t Write(const uint8_t* fields, int64_t n, uint64_t at, OrWord or_word) const {
    uint64_t word = at / 32, pending = 0;
    int filled = static_cast<int>(at % 32);
    for (int64_t i = 0; i < n; ++i) {
      int count;
      pending |= Word(fields[i], count) << filled;
      filled += count;
      at += static_cast<uint64_t>(count);
      if (filled >= 32) {
        or_word(word++, static_cast<uint32_t>(pending));
        pending >>= 32;
        filled -= 32;
      }
    }
    if (filled > 0) or_word(word, static_cast<uint32_t>(pending));
    return at;
  }

  // 32 stream bits from bit `at`; words past `words` read as zeros.
  NEREID_HD static uint32_t Peek(const float* stream, int64_t words, uint64_t at) {
    const uint64_t k = at / 32;
#ifndef __CUDA_ARCH__
    if (k + 1 < static_cast<uint64_t>(words)) {  // both words in the stream: one load
      uint64_t both;
      std::memcpy(&both, stream + k, sizeof(both));
      return static_cast<uint32_t>(both >> (at % 32));
    }
#endif
    const uint64_t low = k < static_cast<uint64_t>(words) ? FloatBits(stream[k]) : 0;
    const uint64_t high = k + 1 < static_cast<uint64_t>(words) ? FloatBits(stream[k + 1]) : 0;
    return static_cast<uint32_t>((low | (high << 32)) >> (at % 32));
  }

  // Reads the word at bit `at`, moving `at` past it: its level, and its sign
  // in `negative`. A gamma code with no one in its next 32 bits (a
  // truncated or foreign stream) reads as 1 after one bit.
  NEREID_HD static uint32_t Read(const float* stream, int64_t words, uint64_t& at, bool& negative) {
    const uint32_t head = Peek(stream, words, at);
    if ((head & 1) == 0) {
      at += 1;
      negative = false;
      return 0;
    }
    negative = (head & 2) != 0;
    // The gamma code within the 30 bits `head` still holds (any level below
    // 2^15): the same reading as below, without a second Peek.
    const uint32_t held = head >> 2;
    if (held != 0) {
      const int n = LowestOne(held);
      if (2 * n + 1 <= 30) {
        at += 2 + 2 * n + 1;
        return (1u << n) | ((held >> (n + 1)) & ((1u << n) - 1));
      }
    }
    at += 2;
    const uint32_t gamma = Peek(stream, words, at);
    if (gamma == 0) {
      at += 1;
      return 1;
    }
    const int n = LowestOne(gamma);
    const uint32_t low = n == 0 ? 0 : Peek(stream, words, at + n + 1) & ((1u << n) - 1);
    at += 2 * n + 1;
    return (1u << n) | low;
  }

  // The bit after a bucket of n words starting at `at`.
  NEREID_HD static uint64_t Skip(const float* stream, int64_t words, uint64_t at, int64_t n) {
    bool negative;
    for (int64_t i = 0; i < n; ++i) Read(stream, words, at, negative);
    return at;
  }

  // out[i] += the decoded value of each of a bucket's n words from `at`,
  // whose norm is `norm` (a zero level adds nothing); returns the bit after.
  NEREID_HD uint64_t DecodeAdd(const float* stream, int64_t words, uint64_t at, int64_t n, float norm, float* out) const {
    const float scale = norm / static_cast<float>(fixed.levels());
    for (int64_t i = 0; i < n; ++i) {
      bool negative;
      const uint32_t level = Read(stream, words, at, negative);
      if (level == 0) continue;
      const float magnitude = scale * static_cast<float>(level);
      out[i] += negative ? -magnitude : magnitude;
    }
    return at;
  }
};

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_QSGD_ELIAS_BUCKETS_H_
