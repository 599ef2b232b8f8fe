// The bucketed gather codes on the GPU (codec_gpu.h). Built with
// -fmad=false, as the host has no fused multiply-add: each operation of the
// shared per-bucket functions rounds as on the host.

#include "ops/cuda/codec_gpu.h"

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include "compress/onebit_buckets.h"
#include "compress/qsgd_buckets.h"
#include "compress/terngrad_buckets.h"

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
  const C coder{layout};
  const int64_t buckets = layout.Buckets();
  if (buckets == 0) return cudaSuccess;
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

}  // namespace

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
