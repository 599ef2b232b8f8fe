// Float32 elementwise kernels. Compiled by nvcc through a genrule (see BUILD);
// the absl::Status launchers live in elementwise_kernels.cc.

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/elementwise_kernels_internal.h"

namespace nereid::cuda::internal {
namespace {

constexpr int kThreadsPerBlock = 256;
// Grids are capped; the grid-stride loops cover any n. 4096 x 256 = 2^20
// threads, so n > 2^20 also exercises the stride.
constexpr int64_t kMaxBlocks = 4096;

// 64-bit grid-stride loop over [0, n).
#define NEREID_GRID_STRIDE_LOOP(i, n)                                     \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x +       \
                   threadIdx.x;                                          \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__global__ void ReluForwardKernel(const float* x,
                                  float* y, int64_t n) {
  NEREID_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void ReluBackwardKernel(const float* dy,
                                   const float* x,
                                   float* dx, int64_t n) {
  NEREID_GRID_STRIDE_LOOP(i, n) { dx[i] = x[i] > 0.0f ? dy[i] : 0.0f; }
}

__global__ void AddKernel(const float* a,
                          const float* b, float* y,
                          int64_t n) {
  NEREID_GRID_STRIDE_LOOP(i, n) { y[i] = a[i] + b[i]; }
}

__global__ void MulKernel(const float* a,
                          const float* b, float* y,
                          int64_t n) {
  NEREID_GRID_STRIDE_LOOP(i, n) { y[i] = a[i] * b[i]; }
}

__global__ void AxpyKernel(float alpha, const float* x,
                           float* y, int64_t n) {
  NEREID_GRID_STRIDE_LOOP(i, n) { y[i] += alpha * x[i]; }
}

#undef NEREID_GRID_STRIDE_LOOP

unsigned int NumBlocks(int64_t n) {
  int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

cudaStream_t AsStream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

// Launches `kernel` over n elements on `stream` and returns the launch's
// error. An error left by an earlier runtime call (already reported to its
// caller) is cleared first so that it is not blamed on this launch; sticky
// errors (a faulted context) cannot be cleared and still surface.
template <typename... Params, typename... Args>
int Launch(void (*kernel)(Params...), int64_t n, void* stream, Args... args) {
  (void)cudaGetLastError();
  kernel<<<NumBlocks(n), kThreadsPerBlock, 0, AsStream(stream)>>>(args...);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchReluForward(const float* x, float* y, int64_t n, void* stream) {
  return Launch(ReluForwardKernel, n, stream, x, y, n);
}

int LaunchReluBackward(const float* dy, const float* x, float* dx, int64_t n,
                       void* stream) {
  return Launch(ReluBackwardKernel, n, stream, dy, x, dx, n);
}

int LaunchAdd(const float* a, const float* b, float* y, int64_t n,
              void* stream) {
  return Launch(AddKernel, n, stream, a, b, y, n);
}

int LaunchMul(const float* a, const float* b, float* y, int64_t n,
              void* stream) {
  return Launch(MulKernel, n, stream, a, b, y, n);
}

int LaunchAxpy(float alpha, const float* x, float* y, int64_t n,
               void* stream) {
  return Launch(AxpyKernel, n, stream, alpha, x, y, n);
}

}  // namespace nereid::cuda::internal
