#ifndef NEREID_OPS_CUDA_ELEMENTWISE_KERNELS_INTERNAL_H_
#define NEREID_OPS_CUDA_ELEMENTWISE_KERNELS_INTERNAL_H_

// The boundary between nvcc-compiled code (elementwise_kernels.cu) and the
// host-compiled launchers (elementwise_kernels.cc). No absl, no CUDA types:
// each function launches one kernel for n > 0 elements and returns the
// cudaError_t of the launch as an int (0 = cudaSuccess).

#include <cstdint>

namespace nereid::cuda::internal {

int LaunchReluForward(const float* x, float* y, int64_t n, void* stream);
int LaunchReluBackward(const float* dy, const float* x, float* dx, int64_t n,
                       void* stream);
int LaunchAdd(const float* a, const float* b, float* y, int64_t n, void* stream);
int LaunchMul(const float* a, const float* b, float* y, int64_t n, void* stream);
int LaunchAxpy(float alpha, const float* x, float* y, int64_t n, void* stream);

}  // namespace nereid::cuda::internal

#endif  // NEREID_OPS_CUDA_ELEMENTWISE_KERNELS_INTERNAL_H_
