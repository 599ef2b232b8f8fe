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

// The handle bound to `stream` under its lock: made by `create` on first use,
// bound to the stream by `bind` at every use.
template <typename Handle, typename Status, typename Create, typename Bind, typename ToStatus>
absl::StatusOr<Locked<Handle>> LockedHandle(PerStream<Handle>& handles, cudaStream_t stream, Create create,
                                            Bind bind, ToStatus to_status, const char* library) {
  std::mutex* handle_mu;
  Handle handle;
  {
    std::lock_guard<std::mutex> lock(handles.mu);
    auto it = handles.of.find(stream);
    if (it == handles.of.end()) {
      Handle made = nullptr;
      RETURN_IF_ERROR(to_status(create(&made), absl::StrCat(library, "Create")));
      it = handles.of.emplace(stream, std::make_pair(made, std::make_unique<std::mutex>())).first;
    }
    handle = it->second.first;
    handle_mu = it->second.second.get();
  }
  Locked<Handle> locked{std::unique_lock<std::mutex>(*handle_mu), handle};
  RETURN_IF_ERROR(to_status(bind(handle, stream), absl::StrCat(library, "SetStream")));
  return locked;
}

absl::StatusOr<Locked<cublasHandle_t>> LockedCublas(cudaStream_t stream) {
  static auto* handles = new PerStream<cublasHandle_t>();
  return LockedHandle<cublasHandle_t, cublasStatus_t>(*handles, stream, cublasCreate, cublasSetStream, CublasStatus,
                                                      "cublas");
}

absl::StatusOr<Locked<cudnnHandle_t>> LockedCudnn(cudaStream_t stream) {
  static auto* handles = new PerStream<cudnnHandle_t>();
  return LockedHandle<cudnnHandle_t, cudnnStatus_t>(*handles, stream, cudnnCreate, cudnnSetStream, CudnnStatus,
                                                    "cudnn");
}

absl::StatusOr<Tensor> Scratch(OpKernelContext& ctx, size_t bytes) {
  const DeviceLaunch* launch = ctx.device_launch();
  if (launch == nullptr || !launch->allocate_scratch) {
    return absl::InternalError(absl::StrCat("the GPU kernel of '", ctx.node().name(), "' has no scratch allocator"));
  }
  // Bytes as uint8 elements.
  return launch->allocate_scratch(DT_UINT8, {static_cast<int64_t>(bytes)});
}

StreamWaiter::StreamWaiter(const OpKernelContext& ctx) {
  if (const DeviceLaunch* launch = ctx.device_launch(); launch != nullptr) host_wait_ = launch->host_wait;
}

absl::Status StreamWaiter::Wait(cudaStream_t stream, const std::string& what) const {
  auto wait = [&] { return CudaStatus(cudaStreamSynchronize(stream), what); };
  return host_wait_ ? host_wait_(what, wait) : wait();
}

absl::Status CopyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, absl::string_view what) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                    absl::StrCat(what, ": cudaMemcpyAsync"));
}

}  // namespace nereid::cuda
