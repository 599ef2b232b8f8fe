#ifndef NEREID_OPS_CUDA_GPU_LAUNCH_H_
#define NEREID_OPS_CUDA_GPU_LAUNCH_H_

// What every GPU kernel (ops/cuda/*_kernels.cc) needs to enqueue its work:
// the node's CUDA stream, a cuBLAS or cuDNN handle bound to it, scratch
// memory, and errors of the three libraries as statuses naming the call.
//
// A GPU kernel's Compute is called on a host thread with the node's device
// stream (OpKernelContext::device_launch); it enqueues work and returns. Its
// inputs and preset outputs are device memory: it reads neither on the host.
//
// Handles: one cuBLAS and one cuDNN handle per stream, made on first use and
// kept for the process (destroying them at exit would race the CUDA
// runtime's own teardown). Several executor threads may enqueue on one
// stream, so a handle is used under its lock (Locked*), which also binds it
// to the stream.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ops/kernel.h"

namespace nereid::cuda {

// The node's stream; an error if the kernel was called without one (not
// launched on a GPU).
absl::StatusOr<cudaStream_t> StreamOf(const OpKernelContext& ctx);

absl::Status CudaStatus(cudaError_t error, absl::string_view what);
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);
absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view what);
// "Conv2D 'conv1': ", for errors that name the node.
inline std::string Prefix(const Node& node) { return absl::StrCat(node.op(), " '", node.name(), "': "); }

// A gpu_math.h launcher's result (a cudaError_t as int), naming the node.
absl::Status Launched(int cuda_error, const OpKernelContext& ctx);

// A library handle bound to one stream, held under its lock.
template <typename Handle>
struct Locked {
  std::unique_lock<std::mutex> lock;
  Handle handle;
};
absl::StatusOr<Locked<cublasHandle_t>> LockedCublas(cudaStream_t stream);
absl::StatusOr<Locked<cudnnHandle_t>> LockedCudnn(cudaStream_t stream);

// Device scratch of `bytes` on the node's stream (the stream-ordered
// allocator: free to reuse by the stream's later work, so keep the Tensor
// only until Compute returns).
absl::StatusOr<Tensor> Scratch(OpKernelContext& ctx, size_t bytes);

// A kernel that hands work to a collective queue (the collectives and the
// transfers on the GPU): Start enqueues what it can and hands the rest to
// the queue, which calls `done`; an error before the hand-over is returned
// instead, and ComputeAsync passes it to `done`.
class IssuingKernel : public AsyncOpKernel {
 public:
  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) final {
    absl::Status status = Start(*ctx, done);
    if (!status.ok()) done(std::move(status));
  }

 protected:
  virtual absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) = 0;
};

// The host's wait for a stream inside a launch: the launch's host_wait
// (DeviceLaunch: counted and traced by the scheduler), or, outside the
// executor, a plain one.
class StreamWaiter {
 public:
  StreamWaiter() = default;
  explicit StreamWaiter(const OpKernelContext& ctx);
  // Returns once the stream's work so far is done; `what` names it.
  absl::Status Wait(cudaStream_t stream, const std::string& what) const;

 private:
  std::function<absl::Status(const std::string&, const std::function<absl::Status()>&)> host_wait_;
};

// dst <- src on the stream (device to device), `bytes` of them.
absl::Status CopyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, absl::string_view what);

}  // namespace nereid::cuda

#endif  // NEREID_OPS_CUDA_GPU_LAUNCH_H_
