#ifndef NEREID_COMPRESS_BUCKET_CODES_H_
#define NEREID_COMPRESS_BUCKET_CODES_H_

// The bucketed gather codes (TernGrad, 1-bit SGD, QSGD's fixed coding) one
// bucket at a time, written once for both the host codecs and their GPU
// kernels (ops/cuda/codec_gpu.cu): every function here compiles for the host
// and, under nvcc, for the device, so a GPU encodes and decodes the same bits
// as the host.
//
// A code is one block per bucket of `bucket` values (the last may be
// shorter): `head` float32 values, then `bits` bits per value packed
// 32/bits to a float-sized word, first value in the lowest bits.
//
// A bucket coder C (terngrad_buckets.h, onebit_buckets.h, qsgd_buckets.h):
//   BucketLayout layout;
//   uint64_t Prepare(g, residual, n, code): writes the bucket's head and
//       returns how many uniform draws its Encode takes;
//   void Encode(g, residual, n, seed, first_draw, code): writes the packed
//       values (draw k of the tensor is UniformAt(seed, k)) and updates the
//       residual (null without one);
//   float Value(code, field): the decoded value of one packed field.
// Draws are numbered across the whole tensor in value order, so a GPU can
// encode its buckets at once after a scan of their draw counts.
//
// No fused multiply-adds: the host build has none (baseline x86-64) and the
// GPU code is built with -fmad=false, so each operation rounds alike.

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define NEREID_HD __host__ __device__
#else
#define NEREID_HD
#endif

namespace nereid::codes {

// A float's bits and back (codes carry bits in float-sized words).
NEREID_HD inline uint32_t FloatBits(float v) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
#endif
}
NEREID_HD inline float BitsFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
#endif
}
NEREID_HD inline bool SignBit(float v) { return (FloatBits(v) >> 31) != 0; }

struct BucketLayout {
  int64_t elements = 0;
  int64_t bucket = 512;
  int head = 1;  // float32 values before the packed ones
  int bits = 1;  // per value, 1..8

  NEREID_HD int per_word() const { return 32 / bits; }
  NEREID_HD int64_t Buckets() const { return (elements + bucket - 1) / bucket; }
  // Values in bucket b.
  NEREID_HD int64_t Values(int64_t b) const {
    const int64_t rest = elements - b * bucket;
    return rest < bucket ? rest : bucket;
  }
  NEREID_HD int64_t Words(int64_t values) const { return (values + per_word() - 1) / per_word(); }
  // Where bucket b's block starts in the code (every earlier bucket is full).
  NEREID_HD int64_t Offset(int64_t b) const { return b * (head + Words(bucket)); }
  // The floats of a whole code.
  NEREID_HD int64_t Floats() const {
    const int64_t b = Buckets();
    return b == 0 ? 0 : Offset(b - 1) + head + Words(Values(b - 1));
  }
  // Packed field j of a bucket whose block starts at `code`.
  NEREID_HD uint32_t Field(const float* code, int64_t j) const {
    const uint32_t word = FloatBits(code[head + j / per_word()]);
    const uint32_t mask = bits == 32 ? ~0u : (1u << bits) - 1;
    return (word >> ((j % per_word()) * bits)) & mask;
  }
};

// Writes fields[0..n) (each below 2^bits) packed after the head of `code`.
// `field(i)` gives field i; called once per value, in order.
template <typename FieldFn>
NEREID_HD void PackFields(const BucketLayout& layout, int64_t n, float* code, FieldFn field) {
  const int per_word = layout.per_word();
  float* words = code + layout.head;
  for (int64_t w = 0; w * per_word < n; ++w) {
    uint32_t word = 0;
    for (int j = 0; j < per_word && w * per_word + j < n; ++j) word |= field(w * per_word + j) << (j * layout.bits);
    words[w] = BitsFloat(word);  // bits, not a number: never summed
  }
}

// Uniform floats in [0, 1) for stochastic rounding: splitmix64, whose k-th
// output depends only on (seed, k), with 24 random bits per float.
// UniformSource (codec.h) is the same sequence drawn in order.
NEREID_HD inline float MixToUniform(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}
constexpr uint64_t kUniformStride = 0x9E3779B97F4A7C15ull;
NEREID_HD inline float UniformAt(uint64_t seed, uint64_t k) { return MixToUniform(seed + (k + 1) * kUniformStride); }

// std::min's choice for floats (a NaN first stays), which fminf is not.
NEREID_HD inline float MinOf(float a, float b) { return b < a ? b : a; }

// The host's loops: a whole tensor's code, bucket after bucket, its draws
// numbered in order; `residual` is null for a coder without one.
template <typename Coder>
void EncodeBuckets(const Coder& coder, const float* g, float* residual, uint64_t seed, float* code) {
  const BucketLayout& layout = coder.layout;
  uint64_t draw = 0;
  for (int64_t b = 0; b < layout.Buckets(); ++b) {
    const int64_t begin = b * layout.bucket, n = layout.Values(b);
    float* block = code + layout.Offset(b);
    float* r = residual == nullptr ? nullptr : residual + begin;
    const uint64_t draws = coder.Prepare(g + begin, r, n, block);
    coder.Encode(g + begin, r, n, seed, draw, block);
    draw += draws;
  }
}

// out += decode(code), a word at a time.
template <typename Coder>
void DecodeAddBuckets(const Coder& coder, const float* code, float* out) {
  const BucketLayout& layout = coder.layout;
  const int per_word = layout.per_word();
  const uint32_t mask = (1u << layout.bits) - 1;
  for (int64_t b = 0; b < layout.Buckets(); ++b) {
    const float* block = code + layout.Offset(b);
    float* o = out + b * layout.bucket;
    const int64_t n = layout.Values(b);
    for (int64_t w = 0, i = 0; i < n; ++w) {
      uint32_t word = FloatBits(block[layout.head + w]);
      for (int j = 0; j < per_word && i < n; ++j, ++i, word >>= layout.bits) o[i] += coder.Value(block, word & mask);
    }
  }
}

}  // namespace nereid::codes

#endif  // NEREID_COMPRESS_BUCKET_CODES_H_
