// The "cuda" device backend over the CUDA runtime. Built only under
// --config=cuda. Streams are non-blocking (they never wait for the legacy
// default stream), events are created without timing (cheaper to record and
// wait on), and every CUDA error becomes a status naming the call.
//
// Launch enqueues a host callback (cudaLaunchHostFunc): it runs in stream
// order but on a CUDA driver thread, so it must neither touch device memory
// nor call CUDA. Real kernels are launched by op code on native_handle().
// A callback's failure is kept by its stream, and later callbacks on the
// stream are skipped, as on the sim.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "device/device.h"
#include "device/device_registry.h"

namespace nereid {
namespace {

absl::Status CudaError(const std::string& where, const char* call, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  const absl::StatusCode code =
      error == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(where, ": ", call, ": CUDA error ", static_cast<int>(error), " (",
                                         cudaGetErrorName(error), "): ", cudaGetErrorString(error)));
}

// Host callbacks run on CUDA's thread; the failure they leave is read by the host.
struct CallbackErrors {
  absl::Status First() {
    std::lock_guard<std::mutex> lock(mu);
    return first;
  }
  std::mutex mu;
  absl::Status first;  // guarded by mu
};

struct HostCallback {
  std::string where;
  Stream::Work work;
  std::shared_ptr<CallbackErrors> errors;
};

void CUDART_CB RunHostCallback(void* data) {
  std::unique_ptr<HostCallback> callback(static_cast<HostCallback*>(data));
  {
    std::lock_guard<std::mutex> lock(callback->errors->mu);
    if (!callback->errors->first.ok()) return;  // the stream has failed: skip
  }
  absl::Status status;
  try {
    status = callback->work();
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("threw: ", e.what()));
  } catch (...) {
    status = absl::InternalError("threw a non-standard exception");
  }
  if (status.ok()) return;
  std::lock_guard<std::mutex> lock(callback->errors->mu);
  if (callback->errors->first.ok()) {
    callback->errors->first =
        absl::Status(status.code(), absl::StrCat(callback->where, ": ", status.message()));
  }
}

// Makes `ordinal` the calling thread's device: CUDA's current device is per thread.
absl::Status UseDevice(const std::string& where, int ordinal) {
  return CudaError(where, "cudaSetDevice", cudaSetDevice(ordinal));
}

class CudaEvent : public Event {
 public:
  CudaEvent(std::string device_name, cudaEvent_t event) : device_name_(std::move(device_name)), event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }

  absl::StatusOr<bool> Query() override {
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaErrorNotReady) {
      // The runtime also keeps NotReady as the thread's last error; left
      // there, the next kernel launch checked with cudaGetLastError on this
      // thread would report it as its own failure.
      (void)cudaGetLastError();
      return false;
    }
    RETURN_IF_ERROR(CudaError(device_name_, "cudaEventQuery", error));
    return true;
  }

  absl::Status Synchronize() override {
    return CudaError(device_name_, "cudaEventSynchronize", cudaEventSynchronize(event_));
  }

  cudaEvent_t event() const { return event_; }

 private:
  const std::string device_name_;
  const cudaEvent_t event_;
};

class CudaStream : public Stream {
 public:
  CudaStream(std::string name, cudaStream_t stream)
      : name_(std::move(name)), stream_(stream), errors_(std::make_shared<CallbackErrors>()) {}

  // Drains the stream, then destroys it.
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  const std::string& name() const override { return name_; }
  void* native_handle() const override { return static_cast<void*>(stream_); }

  absl::Status Launch(std::string name, Work work) override {
    if (!work) return absl::InvalidArgumentError(absl::StrCat(name_, ": launch '", name, "' has no work"));
    RETURN_IF_ERROR(CallbackError());
    auto callback = std::make_unique<HostCallback>(
        HostCallback{absl::StrCat(name_, ": launch '", name, "'"), std::move(work), errors_});
    RETURN_IF_ERROR(
        CudaError(name_, "cudaLaunchHostFunc", cudaLaunchHostFunc(stream_, RunHostCallback, callback.get())));
    static_cast<void>(callback.release());  // RunHostCallback owns it now
    return absl::OkStatus();
  }

  absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  }

  absl::Status Record(Event& event) override {
    auto* cuda = dynamic_cast<CudaEvent*>(&event);
    if (cuda == nullptr) return absl::InvalidArgumentError(absl::StrCat(name_, ": Record: not a CUDA event"));
    return CudaError(name_, "cudaEventRecord", cudaEventRecord(cuda->event(), stream_));
  }

  absl::Status Wait(const Event& event) override {
    auto* cuda = dynamic_cast<const CudaEvent*>(&event);
    if (cuda == nullptr) return absl::InvalidArgumentError(absl::StrCat(name_, ": Wait: not a CUDA event"));
    return CudaError(name_, "cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, cuda->event(), 0));
  }

  absl::Status Synchronize() override {
    RETURN_IF_ERROR(CudaError(name_, "cudaStreamSynchronize", cudaStreamSynchronize(stream_)));
    return CallbackError();
  }

  absl::Status CallbackError() const { return errors_->First(); }
  const std::shared_ptr<CallbackErrors>& errors() const { return errors_; }

 private:
  absl::Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return absl::OkStatus();
    return CudaError(name_, "cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, kind, stream_));
  }

  const std::string name_;
  const cudaStream_t stream_;
  const std::shared_ptr<CallbackErrors> errors_;
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal), name_(absl::StrCat("cuda:", ordinal)) {}

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  KernelStyle kernel_style() const override { return KernelStyle::kEnqueued; }
  const std::string& name() const override { return name_; }

  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) override {
    RETURN_IF_ERROR(UseDevice(name_, ordinal_));
    cudaStream_t stream = nullptr;
    RETURN_IF_ERROR(CudaError(name_, "cudaStreamCreateWithFlags",
                              cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
    auto created = std::make_unique<CudaStream>(absl::StrCat(name_, "/", name), stream);
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(std::remove_if(streams_.begin(), streams_.end(), [](const auto& s) { return s.expired(); }),
                   streams_.end());
    streams_.push_back(created->errors());
    return std::unique_ptr<Stream>(std::move(created));
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    RETURN_IF_ERROR(UseDevice(name_, ordinal_));
    cudaEvent_t event = nullptr;
    RETURN_IF_ERROR(
        CudaError(name_, "cudaEventCreateWithFlags", cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
    return std::unique_ptr<Event>(std::make_unique<CudaEvent>(name_, event));
  }

  absl::StatusOr<void*> AllocateRaw(size_t bytes) override {
    RETURN_IF_ERROR(UseDevice(name_, ordinal_));
    void* ptr = nullptr;
    RETURN_IF_ERROR(CudaError(absl::StrCat(name_, " (", bytes, " bytes)"), "cudaMalloc", cudaMalloc(&ptr, bytes)));
    return ptr;
  }

  absl::Status FreeRaw(void* ptr) override {
    RETURN_IF_ERROR(UseDevice(name_, ordinal_));
    return CudaError(name_, "cudaFree", cudaFree(ptr));
  }

  absl::StatusOr<void*> AllocateHostPinned(size_t bytes) override {
    RETURN_IF_ERROR(UseDevice(name_, ordinal_));
    void* ptr = nullptr;
    RETURN_IF_ERROR(
        CudaError(absl::StrCat(name_, " (", bytes, " bytes)"), "cudaMallocHost", cudaMallocHost(&ptr, bytes)));
    return ptr;
  }

  absl::Status FreeHostPinned(void* ptr) override { return CudaError(name_, "cudaFreeHost", cudaFreeHost(ptr)); }

  absl::Status Synchronize() override {
    RETURN_IF_ERROR(UseDevice(name_, ordinal_));
    RETURN_IF_ERROR(CudaError(name_, "cudaDeviceSynchronize", cudaDeviceSynchronize()));
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& weak : streams_) {
      if (auto errors = weak.lock()) RETURN_IF_ERROR(errors->First());
    }
    return absl::OkStatus();
  }

 private:
  const int ordinal_;
  const std::string name_;
  std::mutex mu_;
  // The live streams' callback failures, for Synchronize; guarded by mu_.
  std::vector<std::weak_ptr<CallbackErrors>> streams_;
};

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const DeviceOptions& options) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver || (error == cudaSuccess && count == 0)) {
    cudaGetLastError();  // clear the error, so later calls do not see it
    return absl::FailedPreconditionError(absl::StrCat("cuda:", options.ordinal, ": no CUDA device on this machine"));
  }
  RETURN_IF_ERROR(CudaError("cuda device", "cudaGetDeviceCount", error));
  if (options.ordinal < 0 || options.ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda:", options.ordinal, ": no such device (this machine has ", count, ")"));
  }
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(options.ordinal));
}

}  // namespace

NEREID_REGISTER_DEVICE("cuda", CreateCudaDevice);

}  // namespace nereid
