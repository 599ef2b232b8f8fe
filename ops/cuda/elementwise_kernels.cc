// Host launchers for the kernels in elementwise_kernels.cu: argument checks
// and cudaError_t -> absl::Status translation (kept out of nvcc's way).

#include "ops/cuda/elementwise_kernels.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "ops/cuda/elementwise_kernels_internal.h"

namespace nereid::cuda {
namespace {

absl::Status CheckCount(absl::string_view what, int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative element count ", n));
  }
  return absl::OkStatus();
}

// Checks n and the device pointers, then runs `launch` (which returns the
// launch's cudaError_t as an int) unless there is nothing to do.
template <typename LaunchFn>
absl::Status CheckedLaunch(absl::string_view kernel, int64_t n,
                           std::initializer_list<const void*> ptrs,
                           LaunchFn launch) {
  absl::Status count = CheckCount(kernel, n);
  if (!count.ok() || n == 0) return count;
  int index = 0;
  for (const void* p : ptrs) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          kernel, ": device pointer argument ", index, " is null with n = ", n));
    }
    ++index;
  }
  return CudaErrorToStatus(launch(), absl::StrCat(kernel, " kernel launch"));
}

absl::StatusOr<size_t> Bytes(absl::string_view what, int64_t n) {
  absl::Status count = CheckCount(what, n);
  if (!count.ok()) return count;
  if (static_cast<uint64_t>(n) > SIZE_MAX / sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": element count ", n, " overflows size_t"));
  }
  return static_cast<size_t>(n) * sizeof(float);
}

absl::Status Copy(absl::string_view what, float* dst, const float* src,
                  int64_t n, cudaMemcpyKind kind);

}  // namespace

absl::Status CudaErrorToStatus(int cuda_error, absl::string_view what) {
  if (cuda_error == 0) return absl::OkStatus();
  const auto err = static_cast<cudaError_t>(cuda_error);
  const std::string message =
      absl::StrCat(what, ": CUDA error ", cuda_error, " (",
                   cudaGetErrorName(err), "): ", cudaGetErrorString(err));
  switch (err) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevicePointer:
      return absl::InvalidArgumentError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls start clean
    return CudaErrorToStatus(err, "cudaGetDeviceCount");
  }
  return count;
}

absl::Status ReluForward(const float* x, float* y, int64_t n, void* stream) {
  return CheckedLaunch("ReluForward", n, {x, y}, [&] {
    return internal::LaunchReluForward(x, y, n, stream);
  });
}

absl::Status ReluBackward(const float* dy, const float* x, float* dx, int64_t n,
                          void* stream) {
  return CheckedLaunch("ReluBackward", n, {dy, x, dx}, [&] {
    return internal::LaunchReluBackward(dy, x, dx, n, stream);
  });
}

absl::Status Add(const float* a, const float* b, float* y, int64_t n,
                 void* stream) {
  return CheckedLaunch("Add", n, {a, b, y},
                       [&] { return internal::LaunchAdd(a, b, y, n, stream); });
}

absl::Status Mul(const float* a, const float* b, float* y, int64_t n,
                 void* stream) {
  return CheckedLaunch("Mul", n, {a, b, y},
                       [&] { return internal::LaunchMul(a, b, y, n, stream); });
}

absl::Status Axpy(float alpha, const float* x, float* y, int64_t n,
                  void* stream) {
  return CheckedLaunch("Axpy", n, {x, y}, [&] {
    return internal::LaunchAxpy(alpha, x, y, n, stream);
  });
}

absl::StatusOr<float*> AllocateDevice(int64_t n) {
  absl::StatusOr<size_t> bytes = Bytes("AllocateDevice", n);
  if (!bytes.ok()) return bytes.status();
  if (*bytes == 0) return nullptr;
  void* ptr = nullptr;
  absl::Status s = CudaErrorToStatus(cudaMalloc(&ptr, *bytes), "cudaMalloc");
  if (!s.ok()) return s;
  return static_cast<float*>(ptr);
}

absl::Status FreeDevice(float* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  return CudaErrorToStatus(cudaFree(ptr), "cudaFree");
}

absl::Status CopyToDevice(const float* host, float* device, int64_t n) {
  return Copy("cudaMemcpy host->device", device, host, n, cudaMemcpyHostToDevice);
}

absl::Status CopyToHost(const float* device, float* host, int64_t n) {
  return Copy("cudaMemcpy device->host", host, device, n, cudaMemcpyDeviceToHost);
}

namespace {

// A blocking copy of n floats; nothing to do for n == 0.
absl::Status Copy(absl::string_view what, float* dst, const float* src,
                  int64_t n, cudaMemcpyKind kind) {
  absl::StatusOr<size_t> bytes = Bytes(what, n);
  if (!bytes.ok()) return bytes.status();
  if (*bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null pointer with n = ", n));
  }
  return CudaErrorToStatus(cudaMemcpy(dst, src, *bytes, kind), what);
}

}  // namespace

absl::Status Synchronize(void* stream) {
  return CudaErrorToStatus(
      cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
      "cudaStreamSynchronize");
}

}  // namespace nereid::cuda
