// The 16-bit wire conversions on the GPU (see wire_format_gpu.h).

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "comm/wire_format_gpu.h"

namespace nereid::wire_gpu {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);  // grid-stride loops cover the rest
}

// bf16 as the host's ToBFloat16: float32's upper half, round to nearest even
// on the dropped bits; a NaN stays a quiet NaN.
__device__ uint16_t ToBFloat16(float x) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__device__ float FromBFloat16(uint16_t bits) { return __uint_as_float(static_cast<uint32_t>(bits) << 16); }

__device__ uint16_t ToHalf(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ float FromHalf(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

__device__ uint16_t EncodeOne(bool bfloat16, float x) { return bfloat16 ? ToBFloat16(x) : ToHalf(x); }
__device__ float DecodeOne(bool bfloat16, uint16_t code) { return bfloat16 ? FromBFloat16(code) : FromHalf(code); }

__global__ void EncodeKernel(bool bfloat16, const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = EncodeOne(bfloat16, in[i]);
  }
}

__global__ void DecodeKernel(bool bfloat16, const uint16_t* in, float* out, float scale, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __fmul_rn(DecodeOne(bfloat16, in[i]), scale);
  }
}

__global__ void ResidualKernel(bool bfloat16, const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float kept = __fsub_rn(x[i], DecodeOne(bfloat16, EncodeOne(bfloat16, x[i])));
    y[i] = __fadd_rn(y[i], kept);
  }
}

}  // namespace

int Encode(bool bfloat16, const float* in, uint16_t* out, int64_t n, void* stream) {
  EncodeKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(bfloat16, in, out, n);
  return static_cast<int>(cudaGetLastError());
}

int Decode(bool bfloat16, const uint16_t* in, float* out, float scale, int64_t n, void* stream) {
  DecodeKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(bfloat16, in, out, scale, n);
  return static_cast<int>(cudaGetLastError());
}

int AddRoundingResidual(bool bfloat16, const float* x, float* y, int64_t n, void* stream) {
  ResidualKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(bfloat16, x, y, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace nereid::wire_gpu
