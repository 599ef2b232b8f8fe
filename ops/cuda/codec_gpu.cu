// The bucketed gather codes on the GPU (codec_gpu.h). Built with
// -fmad=false, as the host has no fused multiply-add: each operation of the
// shared per-bucket functions rounds as on the host.

#include "ops/cuda/codec_gpu.h"

#include <cuda_runtime.h>

#include <climits>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "compress/gradiveq_steps.h"
#include "compress/onebit_buckets.h"
#include "compress/powersgd_steps.h"
#include "compress/qsgd_buckets.h"
#include "compress/qsgd_elias_buckets.h"
#include "compress/terngrad_buckets.h"
#include "compress/topk_select.h"

namespace nereid::cuda::codecs {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

// Draws of 1-bit SGD: none, so no scan.
template <typename C>
constexpr bool kDraws = true;
template <>
constexpr bool kDraws<codes::OneBitBuckets> = false;

template <typename C>
__global__ void PrepareBuckets(C coder, const float* g, const float* residual, float* code, uint64_t* draws) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= coder.layout.Buckets()) return;
  const int64_t begin = b * coder.layout.bucket;
  const uint64_t n = coder.Prepare(g + begin, residual == nullptr ? nullptr : residual + begin,
                                   coder.layout.Values(b), code + coder.layout.Offset(b));
  if (draws != nullptr) draws[b] = n;
}

template <typename C>
__global__ void EncodeBuckets(C coder, const float* g, float* residual, uint64_t seed, const uint64_t* first_draw,
                              float* code) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= coder.layout.Buckets()) return;
  const int64_t begin = b * coder.layout.bucket;
  coder.Encode(g + begin, residual == nullptr ? nullptr : residual + begin, coder.layout.Values(b), seed,
               first_draw == nullptr ? 0 : first_draw[b], code + coder.layout.Offset(b));
}

template <typename C>
__global__ void DecodeAverageValues(C coder, const float* codes, int64_t stride, int world, float inv, float* average) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= coder.layout.elements) return;
  const int64_t b = i / coder.layout.bucket, j = i - b * coder.layout.bucket;
  const float* block = codes + coder.layout.Offset(b);
  float sum = 0.0f;
  for (int r = 0; r < world; ++r, block += stride) sum += coder.Value(block, coder.layout.Field(block, j));
  average[i] = sum * inv;
}

// The draws' counts and first indices (one each per bucket), then CUB's.
size_t CountBytes(const codes::BucketLayout& layout) {
  return 2 * sizeof(uint64_t) * static_cast<size_t>(layout.Buckets());
}

template <typename C>
size_t ScratchBytes(const codes::BucketLayout& layout) {
  if (!kDraws<C>) return 0;
  size_t scan = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
                                static_cast<int>(layout.Buckets()));
  return CountBytes(layout) + scan;
}

template <typename C>
int EncodeWith(const codes::BucketLayout& layout, const float* g, float* residual, uint64_t seed, void* scratch,
               size_t scratch_bytes, float* code, cudaStream_t stream) {
  (void)cudaGetLastError();  // an earlier call's error is not this launch's (CUB peeks at it)
  const C coder{layout};
  const int64_t buckets = layout.Buckets();
  if (buckets == 0) return cudaSuccess;
  if (buckets > INT_MAX) return cudaErrorInvalidValue;  // CUB's item count
  uint64_t* draws = nullptr;
  uint64_t* first = nullptr;
  if (kDraws<C>) {
    if (scratch_bytes < ScratchBytes<C>(layout)) return cudaErrorInvalidValue;
    draws = static_cast<uint64_t*>(scratch);
    first = draws + buckets;
  }
  PrepareBuckets<<<Blocks(buckets), kThreads, 0, stream>>>(coder, g, residual, code, draws);
  if (kDraws<C>) {
    size_t scan = scratch_bytes - CountBytes(layout);
    const cudaError_t scanned = cub::DeviceScan::ExclusiveSum(static_cast<char*>(scratch) + CountBytes(layout), scan,
                                                              draws, first, static_cast<int>(buckets), stream);
    if (scanned != cudaSuccess) return scanned;
  }
  EncodeBuckets<<<Blocks(buckets), kThreads, 0, stream>>>(coder, g, residual, seed, first, code);
  return cudaGetLastError();
}

template <typename C>
int DecodeAverageWith(const codes::BucketLayout& layout, const float* codes, int64_t stride, int world,
                      float* average, cudaStream_t stream) {
  (void)cudaGetLastError();
  if (layout.elements == 0) return cudaSuccess;
  const float inv = 1.0f / static_cast<float>(world);
  DecodeAverageValues<<<Blocks(layout.elements), kThreads, 0, stream>>>(C{layout}, codes, stride, world, inv, average);
  return cudaGetLastError();
}

// Calls fn with a default-made value of the coder's type.
template <typename Fn>
auto WithCoder(Coder coder, Fn fn) {
  switch (coder) {
    case Coder::kTernGrad:
      return fn(codes::TernGradBuckets{});
    case Coder::kOneBit:
      return fn(codes::OneBitBuckets{});
    case Coder::kQsgd:
      break;
  }
  return fn(codes::QsgdBuckets{});
}

__global__ void TopKAccumulateKeys(int64_t n, float momentum, const float* g, float* u, float* v, uint64_t* keys) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  codes::TopKAccumulate(momentum, g[i], u == nullptr ? nullptr : u + i, v + i);
  keys[i] = codes::TopKKey(v[i], static_cast<uint32_t>(i));
}

__global__ void TopKIndices(int64_t k, const uint64_t* keys, uint32_t* index) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j < k) index[j] = static_cast<uint32_t>(keys[j]);  // the low 32 bits
}

__global__ void TopKWrite(int64_t k, const uint32_t* index, float* u, float* v, float* code) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= k) return;
  const uint32_t i = index[j];
  code[2 * j] = codes::BitsFloat(i);  // bits, not a number: never summed
  code[2 * j + 1] = v[i];
  v[i] = 0.0f;
  if (u != nullptr) u[i] = 0.0f;
}

// One rank's pairs: its indices are distinct, so no two threads add to one value.
__global__ void TopKScatterAdd(int64_t n, int64_t k, const float* code, float* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= k) return;
  const uint32_t i = codes::FloatBits(code[2 * j]);
  if (i < n) out[i] += code[2 * j + 1];  // a corrupt index must not write out of bounds
}

__global__ void ScaleValues(int64_t n, float scale, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= scale;
}

// Scratch: the keys twice, the k indices twice, then CUB's.
struct TopKScratch {
  size_t keys, indices, sort;
  static TopKScratch Of(int64_t n, int64_t k) {
    TopKScratch s{2 * sizeof(uint64_t) * static_cast<size_t>(n), 2 * sizeof(uint32_t) * static_cast<size_t>(k), 0};
    size_t by_key = 0, by_index = 0;
    cub::DeviceRadixSort::SortKeys(nullptr, by_key, static_cast<const uint64_t*>(nullptr),
                                   static_cast<uint64_t*>(nullptr), static_cast<int>(n));
    cub::DeviceRadixSort::SortKeys(nullptr, by_index, static_cast<const uint32_t*>(nullptr),
                                   static_cast<uint32_t*>(nullptr), static_cast<int>(k));
    s.sort = by_key > by_index ? by_key : by_index;
    return s;
  }
  size_t total() const { return keys + indices + sort; }
};

__global__ void PowerSgdAccumulate(int64_t count, const float* g, float* mat) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) mat[i] += g[i];
}

// zero[j]: Q's column j is all zeros (a fresh Q, or M had no part along it).
__global__ void PowerSgdZeroColumns(int64_t m, int64_t r, const float* q, unsigned char* zero) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= r) return;
  bool all = true;
  for (int64_t k = 0; k < m && all; ++k) all = q[k * r + j] == 0.0f;
  zero[j] = all ? 1 : 0;
}

__global__ void PowerSgdSeed(int64_t m, int64_t r, const unsigned char* zero, const float* normals, float* q) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < m * r && zero[e % r]) q[e] = normals[e];
}

__global__ void PowerSgdP(int64_t n, int64_t m, int64_t r, const float* mat, const float* q, float* p) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n * r) p[e] = codes::PowerSgdP(mat, q, m, r, e / r, e % r);
}

__global__ void PowerSgdQ(int64_t n, int64_t m, int64_t r, const float* mat, const float* p, float* q) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < m * r) q[e] = codes::PowerSgdQ(mat, p, n, m, r, e / r, e % r);
}

__global__ void ScaleInto(int64_t count, const float* in, float scale, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = in[i] * scale;
}

// One thread: the host's column order and sums.
__global__ void PowerSgdOrthonormalise(int64_t n, int64_t r, float* p, double* col, double* basis) {
  if (blockIdx.x == 0 && threadIdx.x == 0) codes::OrthonormaliseColumns(p, n, r, col, basis);
}

__global__ void PowerSgdApproximate(int64_t n, int64_t m, int64_t r, const float* p, const float* q, float* mat,
                                    float* average) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * m) return;
  const float a = codes::PowerSgdApproximation(p, q, r, e / m, e % m);
  average[e] = a;
  mat[e] -= a;
}

// QSGD's Elias coding: a bucket per thread (codes::QsgdElias).
__global__ void EliasNorms(codes::QsgdElias coder, const float* g, float* code, uint64_t* draws) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= coder.Buckets()) return;
  const int64_t begin = b * coder.fixed.layout.bucket;
  draws[b] = coder.fixed.Prepare(g + begin, nullptr, coder.fixed.layout.Values(b), code + 1 + b);
}

__global__ void EliasFields(codes::QsgdElias coder, const float* g, uint64_t seed, const float* code,
                            const uint64_t* first_draw, uint8_t* fields, uint64_t* bits) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= coder.Buckets()) return;
  const int64_t begin = b * coder.fixed.layout.bucket;
  const int64_t n = coder.fixed.layout.Values(b);
  coder.Fields(g + begin, n, code[1 + b], seed, first_draw[b], fields + begin);
  bits[b] = coder.Bits(fields + begin, n);
}

__global__ void EliasWrite(codes::QsgdElias coder, const uint8_t* fields, const uint64_t* first_bit, float* code) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= coder.Buckets()) return;
  const int64_t begin = b * coder.fixed.layout.bucket;
  unsigned int* stream = reinterpret_cast<unsigned int*>(code + coder.StreamAt());
  // A bucket's first and last words may be its neighbours' too.
  coder.Write(fields + begin, coder.fixed.layout.Values(b), first_bit[b], [&](uint64_t k, uint32_t word) {
    if (word != 0) atomicOr(stream + k, word);
  });
}

__global__ void EliasUsed(codes::QsgdElias coder, const uint64_t* first_bit, const uint64_t* bits, float* code) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int64_t last = coder.Buckets() - 1;
  const uint64_t total = first_bit[last] + bits[last];
  code[0] = codes::BitsFloat(static_cast<uint32_t>(coder.StreamAt() + static_cast<int64_t>((total + 31) / 32)));
}

__global__ void EliasPadded(const float* code, int64_t floats, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < floats) out[i] = i < static_cast<int64_t>(codes::FloatBits(code[0])) ? code[i] : 0.0f;
}

// Rank r's stream: its words within the `floats` it was sent in.
struct EliasStream {
  const float* code;
  int64_t floats;
  __device__ EliasStream(const float* codes, int64_t stride, int64_t floats_in, int r)
      : code(codes + r * stride), floats(floats_in) {}
  __device__ int64_t words(const codes::QsgdElias& coder) const {
    return floats > coder.StreamAt() ? floats - coder.StreamAt() : 0;
  }
  // The stream's first word (the code's end where it is cut short).
  __device__ const float* stream(const codes::QsgdElias& coder) const {
    return code + (floats < coder.StreamAt() ? floats : coder.StreamAt());
  }
  __device__ float norm(int64_t b) const { return 1 + b < floats ? code[1 + b] : 0.0f; }
};

// One thread per rank: each bucket's first bit in its stream.
__global__ void EliasStarts(codes::QsgdElias coder, const float* codes, int64_t stride, int64_t floats, int world,
                            uint64_t* starts) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= world) return;
  const EliasStream s(codes, stride, floats, r);
  const float* stream = s.stream(coder);
  uint64_t at = 0;
  for (int64_t b = 0; b < coder.Buckets(); ++b) {
    starts[r * coder.Buckets() + b] = at;
    at = coder.Skip(stream, s.words(coder), at, coder.fixed.layout.Values(b));
  }
}

__global__ void EliasDecodeBuckets(codes::QsgdElias coder, const float* codes, int64_t stride, int64_t floats,
                                   int world, const uint64_t* starts, float inv, float* average) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= coder.Buckets()) return;
  const int64_t n = coder.fixed.layout.Values(b);
  float* out = average + b * coder.fixed.layout.bucket;
  for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
  for (int r = 0; r < world; ++r) {
    const EliasStream s(codes, stride, floats, r);
    coder.DecodeAdd(s.stream(coder), s.words(coder), starts[r * coder.Buckets() + b], n, s.norm(b), out);
  }
  for (int64_t i = 0; i < n; ++i) out[i] *= inv;
}

// Encode's scratch: four counts per bucket (draws, first draws, bits,
// first bits), the fields (a byte per value), then CUB's.
struct EliasScratch {
  size_t counts, fields, scan;
  static EliasScratch Of(const codes::QsgdElias& coder) {
    const int64_t buckets = coder.Buckets();
    EliasScratch s{4 * sizeof(uint64_t) * static_cast<size_t>(buckets),
                   (static_cast<size_t>(coder.fixed.layout.elements) + 7) / 8 * 8, 0};
    cub::DeviceScan::ExclusiveSum(nullptr, s.scan, static_cast<const uint64_t*>(nullptr),
                                  static_cast<uint64_t*>(nullptr), static_cast<int>(buckets));
    return s;
  }
  size_t total() const { return counts + fields + scan; }
};

__global__ void Difference(int64_t count, const float* x, const float* y, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = x[i] - y[i];
}

// reference += P Q^T, an element per thread (the push's decode).
__global__ void AddApproximation(int64_t n, int64_t m, int64_t r, const float* p, const float* q, float* reference) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n * m) reference[e] += codes::PowerSgdApproximation(p, q, r, e / m, e % m);
}

__global__ void Mix(int64_t count, const float* x, const float* received, const float* sent, float consensus,
                    float* y) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) y[i] = x[i] + consensus * (received[i] - sent[i]);
}

// GradiVeQ (codes::GradiveqSlices), an output per thread.
__global__ void NonZeroWord(int64_t n, const float* v, uint32_t* word) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && v[i] != 0.0f) atomicOr(word, 1u);  // a NaN is not zero, as on the host
}

__global__ void AddInto(int64_t count, const float* g, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] += g[i];
}

__global__ void GradiveqCoefficients(codes::GradiveqSlices slices, const float* x, const float* basis, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c < slices.Slices() * slices.k) out[c] = slices.Coefficient(x, basis, c / slices.k, c % slices.k);
}

// out = base - U c (subtract) or base + U c, value by value.
__global__ void GradiveqDecode(codes::GradiveqSlices slices, const float* basis, const float* code, float base,
                               bool subtract, float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= slices.elements) return;
  const float v = slices.Decoded(basis, code, e / slices.slice, e % slices.slice);
  if (subtract) {
    out[e] = out[e] - v;
  } else {
    out[e] = base + v;
  }
}

// covariance += the sum of x x^T over the sampled slices: thread (i, j),
// i <= j, adds its entry and its mirror.
__global__ void GradiveqCovariance(codes::GradiveqSlices slices, const float* values, int64_t first, int64_t stride,
                                   float* covariance) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t n = slices.slice;
  if (e >= n * n) return;
  const int64_t i = e / n, j = e % n;
  if (j < i) return;
  const float sum = static_cast<float>(slices.CovarianceSum(values, first, stride, i, j));
  covariance[i * n + j] += sum;
  if (j != i) covariance[j * n + i] += sum;
}

// One thread: the host's Jacobi solver, when the covariance is not all zero.
__global__ void GradiveqBasis(int64_t n, int64_t k, const float* covariance, float* basis, double* a, double* vt,
                              int64_t* order) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (codes::AllZeroValues(covariance, n * n)) return;
  codes::SymmetricTopEigenvectors(covariance, n, k, basis, a, vt, order);
}

// Absorb's scratch: the solver's two matrices and order, then the averaged
// coefficients.
struct GradiveqScratch {
  size_t matrices, order, coefficients;
  static GradiveqScratch Of(const codes::GradiveqCode& code) {
    const size_t n = static_cast<size_t>(code.slices.slice);
    return {2 * n * n * sizeof(double), n * sizeof(int64_t),
            static_cast<size_t>(code.slices.Slices() * code.slices.k) * sizeof(float)};
  }
  size_t total() const { return matrices + order + coefficients; }
};

}  // namespace

size_t GradiveqScratchBytes(const codes::GradiveqCode& code) { return GradiveqScratch::Of(code).total(); }

int GradiveqBasisWord(const codes::GradiveqCode& code, const float* basis, uint32_t* word, void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t e = cudaMemsetAsync(word, 0, sizeof(uint32_t), s);
  if (e != cudaSuccess) return e;
  const int64_t n = code.slices.slice * code.slices.k;
  NonZeroWord<<<Blocks(n), kThreads, 0, s>>>(n, basis, word);
  return cudaGetLastError();
}

int GradiveqContribute(const codes::GradiveqCode& code, codes::GradiveqStep kind, const float* g, const float* basis,
                       float* residual, float* out, void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t n = code.slices.elements;
  const float* x = g;
  if (code.error_feedback) {  // x = residual + g, in the residual's place
    AddInto<<<Blocks(n), kThreads, 0, s>>>(n, g, residual);
    x = residual;
  }
  if (kind != codes::GradiveqStep::kCompressed) {
    cudaError_t e = cudaMemcpyAsync(out, x, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess && code.error_feedback) {
      e = cudaMemsetAsync(residual, 0, static_cast<size_t>(n) * sizeof(float), s);
    }
    return e != cudaSuccess ? e : cudaGetLastError();
  }
  const int64_t coefficients = code.slices.Slices() * code.slices.k;
  GradiveqCoefficients<<<Blocks(coefficients), kThreads, 0, s>>>(code.slices, x, basis, out);
  if (code.error_feedback) {  // residual = x - U c, with this rank's own c
    GradiveqDecode<<<Blocks(n), kThreads, 0, s>>>(code.slices, basis, out, 0.0f, /*subtract=*/true, residual);
  }
  return cudaGetLastError();
}

int GradiveqAbsorb(const codes::GradiveqCode& code, codes::GradiveqStep kind, int64_t step, const float* in, int world,
                   float* covariance, float* basis, void* scratch, size_t scratch_bytes, float* average,
                   void* stream) {
  (void)cudaGetLastError();
  const GradiveqScratch layout = GradiveqScratch::Of(code);
  if (scratch_bytes < layout.total()) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const float inv_world = 1.0f / static_cast<float>(world);
  const int64_t n = code.slices.slice;
  if (kind != codes::GradiveqStep::kCompressed) {
    ScaleInto<<<Blocks(code.slices.elements), kThreads, 0, s>>>(code.slices.elements, in, inv_world, average);
    // Older samples count half at each refresh.
    if (kind == codes::GradiveqStep::kRefreshing) ScaleValues<<<Blocks(n * n), kThreads, 0, s>>>(n * n, 0.5f, covariance);
    const int64_t stride = code.CovarianceStride();
    GradiveqCovariance<<<Blocks(n * n), kThreads, 0, s>>>(code.slices, average, step % stride, stride, covariance);
    if (code.Recomputes(kind, step)) {
      double* a = static_cast<double*>(scratch);
      int64_t* order = reinterpret_cast<int64_t*>(static_cast<char*>(scratch) + layout.matrices);
      GradiveqBasis<<<1, 1, 0, s>>>(n, code.slices.k, covariance, basis, a, a + n * n, order);
    }
    return cudaGetLastError();
  }
  float* coefficients = reinterpret_cast<float*>(static_cast<char*>(scratch) + layout.matrices + layout.order);
  const int64_t count = code.slices.Slices() * code.slices.k;
  ScaleInto<<<Blocks(count), kThreads, 0, s>>>(count, in, inv_world, coefficients);
  GradiveqDecode<<<Blocks(code.slices.elements), kThreads, 0, s>>>(code.slices, basis, coefficients, 0.0f,
                                                                   /*subtract=*/false, average);
  return cudaGetLastError();
}

int LowRankPushEncode(int64_t n, int64_t m, int64_t r, const float* x, float* reference, float* q,
                      const float* normals, float* d, unsigned char* zero, double* col, double* basis, float* p_out,
                      float* q_out, void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  Difference<<<Blocks(n * m), kThreads, 0, s>>>(n * m, x, reference, d);
  PowerSgdZeroColumns<<<Blocks(r), kThreads, 0, s>>>(m, r, q, zero);
  PowerSgdSeed<<<Blocks(m * r), kThreads, 0, s>>>(m, r, zero, normals, q);
  PowerSgdP<<<Blocks(n * r), kThreads, 0, s>>>(n, m, r, d, q, p_out);
  PowerSgdOrthonormalise<<<1, 1, 0, s>>>(n, r, p_out, col, basis);
  PowerSgdQ<<<Blocks(m * r), kThreads, 0, s>>>(n, m, r, d, p_out, q_out);
  const cudaError_t copied =
      cudaMemcpyAsync(q, q_out, static_cast<size_t>(m * r) * sizeof(float), cudaMemcpyDeviceToDevice, s);
  if (copied != cudaSuccess) return copied;
  AddApproximation<<<Blocks(n * m), kThreads, 0, s>>>(n, m, r, p_out, q_out, reference);
  return cudaGetLastError();
}

int LowRankPushAddProduct(int64_t n, int64_t m, int64_t r, const float* p, const float* q, float* reference,
                          void* stream) {
  (void)cudaGetLastError();
  AddApproximation<<<Blocks(n * m), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, m, r, p, q, reference);
  return cudaGetLastError();
}

int LowRankPushMix(int64_t count, const float* x, const float* received, const float* sent, float consensus,
                   float* y, void* stream) {
  (void)cudaGetLastError();
  if (count <= 0) return cudaSuccess;
  Mix<<<Blocks(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(count, x, received, sent, consensus, y);
  return cudaGetLastError();
}

size_t EliasEncodeScratchBytes(const codes::QsgdElias& coder) {
  if (coder.Buckets() <= 0 || coder.Buckets() > INT_MAX) return 0;
  return EliasScratch::Of(coder).total();
}

size_t EliasDecodeScratchBytes(const codes::QsgdElias& coder, int world) {
  return sizeof(uint64_t) * static_cast<size_t>(coder.Buckets()) * static_cast<size_t>(world);
}

int EliasEncode(const codes::QsgdElias& coder, const float* g, uint64_t seed, void* scratch, size_t scratch_bytes,
                float* code, void* stream) {
  (void)cudaGetLastError();
  const int64_t buckets = coder.Buckets();
  if (buckets <= 0 || buckets > INT_MAX) return cudaErrorInvalidValue;
  const EliasScratch layout = EliasScratch::Of(coder);
  if (scratch_bytes < layout.total()) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint64_t* draws = static_cast<uint64_t*>(scratch);
  uint64_t* first_draw = draws + buckets;
  uint64_t* bits = first_draw + buckets;
  uint64_t* first_bit = bits + buckets;
  uint8_t* fields = static_cast<uint8_t*>(scratch) + layout.counts;
  void* temp = static_cast<char*>(scratch) + layout.counts + layout.fields;
  // The stream is ORed into: zero first.
  cudaError_t e = cudaMemsetAsync(code, 0, static_cast<size_t>(coder.BoundFloats()) * sizeof(float), s);
  if (e != cudaSuccess) return e;
  EliasNorms<<<Blocks(buckets), kThreads, 0, s>>>(coder, g, code, draws);
  size_t bytes = layout.scan;
  e = cub::DeviceScan::ExclusiveSum(temp, bytes, draws, first_draw, static_cast<int>(buckets), s);
  if (e != cudaSuccess) return e;
  EliasFields<<<Blocks(buckets), kThreads, 0, s>>>(coder, g, seed, code, first_draw, fields, bits);
  bytes = layout.scan;
  e = cub::DeviceScan::ExclusiveSum(temp, bytes, bits, first_bit, static_cast<int>(buckets), s);
  if (e != cudaSuccess) return e;
  EliasWrite<<<Blocks(buckets), kThreads, 0, s>>>(coder, fields, first_bit, code);
  EliasUsed<<<1, 1, 0, s>>>(coder, first_bit, bits, code);
  return cudaGetLastError();
}

int EliasPad(const float* code, int64_t floats, float* out, void* stream) {
  (void)cudaGetLastError();
  if (floats <= 0) return cudaSuccess;
  EliasPadded<<<Blocks(floats), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(code, floats, out);
  return cudaGetLastError();
}

int EliasDecodeAverage(const codes::QsgdElias& coder, const float* codes, int64_t stride, int64_t floats, int world,
                       void* scratch, size_t scratch_bytes, float* average, void* stream) {
  (void)cudaGetLastError();
  if (coder.Buckets() <= 0) return cudaSuccess;
  if (world < 1 || scratch_bytes < EliasDecodeScratchBytes(coder, world)) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint64_t* starts = static_cast<uint64_t*>(scratch);
  EliasStarts<<<Blocks(world), kThreads, 0, s>>>(coder, codes, stride, floats, world, starts);
  EliasDecodeBuckets<<<Blocks(coder.Buckets()), kThreads, 0, s>>>(coder, codes, stride, floats, world, starts,
                                                                   1.0f / static_cast<float>(world), average);
  return cudaGetLastError();
}

int PowerSgdContributeP(int64_t n, int64_t m, int64_t r, const float* g, float* mat, float* q, const float* normals,
                        unsigned char* zero, float* p_out, void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  PowerSgdAccumulate<<<Blocks(n * m), kThreads, 0, s>>>(n * m, g, mat);
  PowerSgdZeroColumns<<<Blocks(r), kThreads, 0, s>>>(m, r, q, zero);
  PowerSgdSeed<<<Blocks(m * r), kThreads, 0, s>>>(m, r, zero, normals, q);
  PowerSgdP<<<Blocks(n * r), kThreads, 0, s>>>(n, m, r, mat, q, p_out);
  return cudaGetLastError();
}

int PowerSgdAbsorbP(int64_t n, int64_t r, const float* in, int world, float* p, double* col, double* basis,
                    void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  ScaleInto<<<Blocks(n * r), kThreads, 0, s>>>(n * r, in, 1.0f / static_cast<float>(world), p);
  PowerSgdOrthonormalise<<<1, 1, 0, s>>>(n, r, p, col, basis);
  return cudaGetLastError();
}

int PowerSgdContributeQ(int64_t n, int64_t m, int64_t r, const float* mat, const float* p, float* q_out,
                        void* stream) {
  (void)cudaGetLastError();
  PowerSgdQ<<<Blocks(m * r), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, m, r, mat, p, q_out);
  return cudaGetLastError();
}

int PowerSgdAbsorbQ(int64_t n, int64_t m, int64_t r, const float* in, int world, const float* p, float* q, float* mat,
                    float* average, void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  ScaleInto<<<Blocks(m * r), kThreads, 0, s>>>(m * r, in, 1.0f / static_cast<float>(world), q);
  PowerSgdApproximate<<<Blocks(n * m), kThreads, 0, s>>>(n, m, r, p, q, mat, average);
  return cudaGetLastError();
}

size_t TopKScratchBytes(int64_t n, int64_t k) {
  if (n <= 0 || n > INT_MAX || k <= 0 || k > n) return 0;
  return TopKScratch::Of(n, k).total();
}

int TopKEncode(int64_t n, int64_t k, float momentum, const float* g, float* u, float* v, void* scratch,
               size_t scratch_bytes, float* code, void* stream) {
  (void)cudaGetLastError();
  if (n <= 0 || n > INT_MAX || k <= 0 || k > n) return cudaErrorInvalidValue;
  const TopKScratch layout = TopKScratch::Of(n, k);
  if (scratch_bytes < layout.total()) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint64_t* keys = static_cast<uint64_t*>(scratch);
  uint64_t* sorted = keys + n;
  uint32_t* index = reinterpret_cast<uint32_t*>(static_cast<char*>(scratch) + layout.keys);
  uint32_t* ordered = index + k;
  void* temp = static_cast<char*>(scratch) + layout.keys + layout.indices;
  TopKAccumulateKeys<<<Blocks(n), kThreads, 0, s>>>(n, momentum, g, u, v, keys);
  size_t bytes = layout.sort;
  cudaError_t e = cub::DeviceRadixSort::SortKeys(temp, bytes, keys, sorted, static_cast<int>(n), 0, 64, s);
  if (e != cudaSuccess) return e;
  TopKIndices<<<Blocks(k), kThreads, 0, s>>>(k, sorted, index);
  bytes = layout.sort;
  e = cub::DeviceRadixSort::SortKeys(temp, bytes, index, ordered, static_cast<int>(k), 0, 32, s);
  if (e != cudaSuccess) return e;
  TopKWrite<<<Blocks(k), kThreads, 0, s>>>(k, ordered, u, v, code);
  return cudaGetLastError();
}

int TopKDecodeAverage(int64_t n, int64_t k, const float* codes, int64_t stride, int world, float* average,
                      void* stream) {
  (void)cudaGetLastError();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemsetAsync(average, 0, static_cast<size_t>(n) * sizeof(float), s);
  if (e != cudaSuccess) return e;
  for (int r = 0; r < world; ++r) TopKScatterAdd<<<Blocks(k), kThreads, 0, s>>>(n, k, codes + r * stride, average);
  ScaleValues<<<Blocks(n), kThreads, 0, s>>>(n, 1.0f / static_cast<float>(world), average);
  return cudaGetLastError();
}

size_t EncodeScratchBytes(Coder coder, const codes::BucketLayout& layout) {
  return WithCoder(coder, [&](auto c) { return ScratchBytes<decltype(c)>(layout); });
}

int Encode(Coder coder, const codes::BucketLayout& layout, const float* g, float* residual, uint64_t seed,
           void* scratch, size_t scratch_bytes, float* code, void* stream) {
  return WithCoder(coder, [&](auto c) {
    return EncodeWith<decltype(c)>(layout, g, residual, seed, scratch, scratch_bytes, code,
                                   static_cast<cudaStream_t>(stream));
  });
}

int DecodeAverage(Coder coder, const codes::BucketLayout& layout, const float* codes, int64_t stride, int world,
                  float* average, void* stream) {
  return WithCoder(coder, [&](auto c) {
    return DecodeAverageWith<decltype(c)>(layout, codes, stride, world, average, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace nereid::cuda::codecs
