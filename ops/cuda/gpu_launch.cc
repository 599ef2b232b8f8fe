#include "ops/cuda/gpu_launch.h"

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "device/device.h"

namespace nereid::cuda {
namespace {

// Handles per stream, made on first use; never destroyed (see the header).
template <typename Handle>
struct PerStream {
  std::mutex mu;  // guards `of`
  std::map<cudaStream_t, std::pair<Handle, std::unique_ptr<std::mutex>>> of;
};

}  // namespace

absl::StatusOr<cudaStream_t> StreamOf(const OpKernelContext& ctx) {
  const DeviceLaunch* launch = ctx.device_launch();
  if (launch == nullptr || launch->stream == nullptr) {
    return absl::InternalError(absl::StrCat("the GPU kernel of '", ctx.node().name(), "' was called without a stream"));
  }
  return static_cast<cudaStream_t>(launch->stream->native_handle());
}

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const absl::StatusCode code =
      error == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": CUDA error ", static_cast<int>(error), " (", cudaGetErrorName(error),
                                         "): ", cudaGetErrorString(error)));
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": cuBLAS error ", static_cast<int>(status), " (", cublasGetStatusString(status), ")"));
}

absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view what) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": cuDNN error ", static_cast<int>(status), " (", cudnnGetErrorString(status), ")"));
}

absl::Status Launched(int cuda_error, const OpKernelContext& ctx) {
  return CudaStatus(static_cast<cudaError_t>(cuda_error),
                    absl::StrCat(ctx.node().op(), " '", ctx.node().name(), "': kernel launch"));
}

absl::StatusOr<Locked<cublasHandle_t>> LockedCublas(cudaStream_t stream) {
  static auto* handles = new PerStream<cublasHandle_t>();
  std::mutex* handle_mu;
  cublasHandle_t handle;
  {
    std::lock_guard<std::mutex> lock(handles->mu);
    auto it = handles->of.find(stream);
    if (it == handles->of.end()) {
      cublasHandle_t made = nullptr;
      RETURN_IF_ERROR(CublasStatus(cublasCreate(&made), "cublasCreate"));
      it = handles->of.emplace(stream, std::make_pair(made, std::make_unique<std::mutex>())).first;
    }
    handle = it->second.first;
    handle_mu = it->second.second.get();
  }
  Locked<cublasHandle_t> locked{std::unique_lock<std::mutex>(*handle_mu), handle};
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(handle, stream), "cublasSetStream"));
  return locked;
}

absl::StatusOr<Locked<cudnnHandle_t>> LockedCudnn(cudaStream_t stream) {
  static auto* handles = new PerStream<cudnnHandle_t>();
  std::mutex* handle_mu;
  cudnnHandle_t handle;
  {
    std::lock_guard<std::mutex> lock(handles->mu);
    auto it = handles->of.find(stream);
    if (it == handles->of.end()) {
      cudnnHandle_t made = nullptr;
      RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&made), "cudnnCreate"));
      it = handles->of.emplace(stream, std::make_pair(made, std::make_unique<std::mutex>())).first;
    }
    handle = it->second.first;
    handle_mu = it->second.second.get();
  }
  Locked<cudnnHandle_t> locked{std::unique_lock<std::mutex>(*handle_mu), handle};
  RETURN_IF_ERROR(CudnnStatus(cudnnSetStream(handle, stream), "cudnnSetStream"));
  return locked;
}

absl::StatusOr<Tensor> Scratch(OpKernelContext& ctx, size_t bytes) {
  const DeviceLaunch* launch = ctx.device_launch();
  if (launch == nullptr || !launch->allocate_scratch) {
    return absl::InternalError(absl::StrCat("the GPU kernel of '", ctx.node().name(), "' has no scratch allocator"));
  }
  // Bytes as uint8 elements.
  return launch->allocate_scratch(DT_UINT8, {static_cast<int64_t>(bytes)});
}

absl::Status CopyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, absl::string_view what) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                    absl::StrCat(what, ": cudaMemcpyAsync"));
}

}  // namespace nereid::cuda
