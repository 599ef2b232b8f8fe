#ifndef NEREID_OPS_CUDA_ELEMENTWISE_KERNELS_H_
#define NEREID_OPS_CUDA_ELEMENTWISE_KERNELS_H_

// Float32 elementwise CUDA kernels with host launchers. This header is plain
// C++ (no CUDA types), so any target may include it; it is only built under
// --config=cuda.
//
// All pointers passed to launchers are device pointers. `stream` is a
// cudaStream_t passed as void* (nullptr = the default stream). Launchers are
// asynchronous: they report argument and launch errors; errors raised while a
// kernel runs surface from a later call such as Synchronize(). n == 0 launches
// nothing (null pointers are then allowed); n < 0 or a null pointer with n > 0
// is InvalidArgument. Outputs may alias inputs exactly (in-place use).

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid::cuda {

// Number of visible CUDA devices; an error (with cudaGetDeviceCount's error
// string) when the runtime or driver is unusable, e.g. on a machine with no GPU.
absl::StatusOr<int> DeviceCount();

// y = max(x, 0).
absl::Status ReluForward(const float* x, float* y, int64_t n, void* stream);
// dx = dy * (x > 0), computed as a select: dx = x > 0 ? dy : 0.
absl::Status ReluBackward(const float* dy, const float* x, float* dx, int64_t n,
                          void* stream);
// y = a + b.
absl::Status Add(const float* a, const float* b, float* y, int64_t n,
                 void* stream);
// y = a * b.
absl::Status Mul(const float* a, const float* b, float* y, int64_t n,
                 void* stream);
// y += alpha * x (may be contracted to a fused multiply-add).
absl::Status Axpy(float alpha, const float* x, float* y, int64_t n,
                  void* stream);

// Helpers for tests and simple callers.
absl::StatusOr<float*> AllocateDevice(int64_t n);  // n floats; n == 0 -> nullptr
absl::Status FreeDevice(float* ptr);               // nullptr is a no-op
absl::Status CopyToDevice(const float* host, float* device, int64_t n);
absl::Status CopyToHost(const float* device, float* host, int64_t n);
absl::Status Synchronize(void* stream);  // waits for `stream` (nullptr: default)

// Translates a cudaError_t (as int) into a Status: OK for cudaSuccess (0),
// otherwise an error naming `what` with the CUDA error name and string.
absl::Status CudaErrorToStatus(int cuda_error, absl::string_view what);

}  // namespace nereid::cuda

#endif  // NEREID_OPS_CUDA_ELEMENTWISE_KERNELS_H_
