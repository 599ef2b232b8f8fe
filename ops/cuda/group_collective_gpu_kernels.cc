// The group collectives on the GPU (place(device=cuda, comm=device)): each
// launch is handed to its group's collective queue like the CPU kernel's
// (ops/group_collective_call.h: the same key, so every member issues the
// group's collectives in one order), and when the queue issues it, NCCL's
// call is enqueued on the node's stream (the group's communication stream)
// through the group's NCCL communicator, reading the input and writing the
// output in place. No host thread waits for the data: the output is marked
// written by that work, and its consumers wait for it by event. A 16-bit
// wire (gossip's pushes under compress(method=fp16|bf16)) is coded as the
// CPU kernels code it: GroupAllReduce through NCCL's 16-bit allreduce,
// GroupSendRecv by the kernel itself around a float32 transfer.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/wire_format.h"
#include "comm/wire_format_gpu.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/group_collective_call.h"

namespace nereid {
namespace {

class GroupCollectiveGpuKernel : public cuda::IssuingKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(call_.Init(node, attrs));
    name_ = cuda::Prefix(node);
    if (const auto wire = attrs.find("wire"); wire != attrs.end()) {
      ASSIGN_OR_RETURN(wire_, ParseWireType(wire->second->s()));
    }
    return absl::OkStatus();
  }

 protected:
  // Enqueues the NCCL call of one launch on `stream`; `x` and `y` are
  // device memory. `step`: the training step (evaluation: the step it
  // follows).
  // `scratch`: ScratchBytes(x) of stream-ordered device memory (empty for 0).
  virtual absl::Status Enqueue(StreamCollectives& on_stream, const Communicator& comm, const Tensor& x, Tensor& y,
                               Tensor& scratch, const CollectiveOptions& options, int64_t step, void* stream) = 0;
  // The device scratch a launch's Enqueue needs, allocated with its output.
  virtual size_t ScratchBytes(const Tensor& x) const { return 0; }
  // The node's wire format (float32 for an op without one).
  WireType wire() const { return wire_; }

 private:
  // Hands the launch to the queue; an error before the hand-over is
  // returned (`done` not called).
  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0));
    const Tensor& x = ctx.input(0);
    Tensor scratch;
    if (const size_t bytes = ScratchBytes(x); bytes > 0) {
      ASSIGN_OR_RETURN(scratch, cuda::Scratch(ctx, bytes));
    }
    CollectiveQueue* queue = ctx.collectives();
    if (queue == nullptr) {
      RETURN_IF_ERROR(call_.Alone());
      RETURN_IF_ERROR(cuda::CopyOnStream(y->raw(), x.raw(), x.num_bytes(), stream, name_ + "a group of one"));
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(GroupCollectiveCall::Issue issue, call_.IssueOf(ctx, *queue));
    // The node is not done before its call is issued, so its input and
    // output live until then; the streams' order keeps them for the call.
    queue->Submit(
        issue.key, issue.bucket,
        [this, input = Tensor::ViewOf(x), output = Tensor::ViewOf(*y), scratch = std::move(scratch),
         options = issue.options, step = issue.step, stream](Communicator& comm) mutable -> absl::Status {
          RETURN_IF_ERROR(call_.CheckGroupSize(comm));
          StreamCollectives* on_stream = comm.stream_collectives();
          if (on_stream == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                name_, "the group's communicator (", comm.backend(),
                ") cannot enqueue on a GPU stream: collectives placed on cuda need NCCL"));
          }
          return Enqueue(*on_stream, comm, input, output, scratch, options, step, stream);
        },
        call_.Reported(std::move(done)));
    return absl::OkStatus();
  }

  GroupCollectiveCall call_;
  std::string name_;
  WireType wire_ = WireType::kFloat32;
};

// A wire_gpu launcher's result (a cudaError_t as int).
absl::Status Launched(int cuda_error, absl::string_view what) {
  return cuda::CudaStatus(static_cast<cudaError_t>(cuda_error), what);
}

absl::Span<const float> In(const Tensor& x) { return absl::MakeConstSpan(x.data<float>(), x.num_elements()); }
absl::Span<float> Out(Tensor& y) { return absl::MakeSpan(y.data<float>(), y.num_elements()); }

class GroupAllGatherGpuKernel : public GroupCollectiveGpuKernel {
  absl::Status Enqueue(StreamCollectives& on_stream, const Communicator& comm, const Tensor& x, Tensor& y,
                       Tensor& scratch, const CollectiveOptions& options, int64_t step, void* stream) override {
    return on_stream.EnqueueAllGather(In(x), Out(y), options, stream);
  }
};

class GroupReduceScatterGpuKernel : public GroupCollectiveGpuKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(GroupCollectiveGpuKernel::Init(node, attrs));
    reduce_ = attrs.at("reduce")->s() == "avg" ? ReduceOp::kAvg : ReduceOp::kSum;
    return absl::OkStatus();
  }

 private:
  absl::Status Enqueue(StreamCollectives& on_stream, const Communicator& comm, const Tensor& x, Tensor& y,
                       Tensor& scratch, const CollectiveOptions& options, int64_t step, void* stream) override {
    return on_stream.EnqueueReduceScatter(In(x), Out(y), reduce_, options, stream);
  }

  ReduceOp reduce_ = ReduceOp::kSum;
};

// The sum in the output (NCCL reduces out of place).
class GroupAllReduceGpuKernel : public GroupCollectiveGpuKernel {
  absl::Status Enqueue(StreamCollectives& on_stream, const Communicator& comm, const Tensor& x, Tensor& y,
                       Tensor& scratch, const CollectiveOptions& options, int64_t step, void* stream) override {
    RETURN_IF_ERROR(cuda::CopyOnStream(y.raw(), x.raw(), x.num_bytes(), static_cast<cudaStream_t>(stream),
                                       "GroupAllReduce: the input into the output"));
    CollectiveOptions with_wire = options;
    with_wire.wire = wire();
    return on_stream.EnqueueAllReduce(Out(y), ReduceOp::kSum, with_wire, stream);
  }
};

// Each step's shift within the group, as the CPU kernel: to rank + offset,
// from rank - offset, the offsets cycled by step.
class GroupSendRecvGpuKernel : public GroupCollectiveGpuKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(GroupCollectiveGpuKernel::Init(node, attrs));
    for (const int64_t o : attrs.at("offsets")->list().i()) offsets_.push_back(o);
    return absl::OkStatus();
  }

 private:
  absl::Status Enqueue(StreamCollectives& on_stream, const Communicator& comm, const Tensor& x, Tensor& y,
                       Tensor& scratch, const CollectiveOptions& options, int64_t step, void* stream) override {
    const int64_t n = comm.world();
    const int64_t offset = ((offsets_[static_cast<size_t>(step) % offsets_.size()] % n) + n) % n;
    if (offset == 0 && wire() == WireType::kFloat32) {  // to itself: NCCL does not send to its own rank
      return cuda::CopyOnStream(y.raw(), x.raw(), x.num_bytes(), static_cast<cudaStream_t>(stream),
                                "GroupSendRecv: a shift of 0");
    }
    const int to = static_cast<int>((comm.rank() + offset) % n);
    const int from = static_cast<int>((comm.rank() - offset + n) % n);
    if (wire() == WireType::kFloat32) return on_stream.EnqueueSendRecv(In(x), to, Out(y), from, options, stream);
    return SendRecvRounded(on_stream, x, to, y, from, scratch, options, static_cast<cudaStream_t>(stream),
                           /*to_itself=*/offset == 0);
  }

  // Two float slots of codes per pair of values: what goes and what comes.
  static int64_t Slots(const Tensor& x) { return (x.num_elements() + 1) / 2; }
  size_t ScratchBytes(const Tensor& x) const override {
    return wire() == WireType::kFloat32 ? 0 : static_cast<size_t>(2 * Slots(x)) * sizeof(float);
  }

  // As the CPU kernel: the 16-bit codes travel two to a float slot, and
  // y = decoded arrival + (x - decoded x), so what rounding took off x stays
  // with its sender and every member's x is counted once in the sum.
  absl::Status SendRecvRounded(StreamCollectives& on_stream, const Tensor& x, int to, Tensor& y, int from,
                               Tensor& scratch, const CollectiveOptions& options, cudaStream_t stream,
                               bool to_itself) {
    const int64_t n = x.num_elements(), slots = Slots(x);
    if (n == 0) return absl::OkStatus();
    const bool bf16 = wire() == WireType::kBFloat16;
    float* going = scratch.data<float>();
    float* coming = going + slots;
    auto* going_codes = reinterpret_cast<uint16_t*>(going);
    if (n % 2 == 1) {  // the last slot's unused half goes as zeros, not as whatever was there
      RETURN_IF_ERROR(cuda::CudaStatus(cudaMemsetAsync(going + slots - 1, 0, sizeof(float), stream),
                                       "GroupSendRecv: clearing the last slot"));
    }
    RETURN_IF_ERROR(Launched(wire_gpu::Encode(bf16, x.data<float>(), going_codes, n, stream),
                             "GroupSendRecv: encoding the push"));
    if (to_itself) {  // a shift of 0: its own codes come back, as through the CPU's self-delivery
      coming = going;
    } else {
      RETURN_IF_ERROR(on_stream.EnqueueSendRecv(absl::MakeConstSpan(going, slots), to,
                                                absl::MakeSpan(coming, slots), from, options, stream));
    }
    RETURN_IF_ERROR(Launched(
        wire_gpu::Decode(bf16, reinterpret_cast<const uint16_t*>(coming), y.data<float>(), 1.0f, n, stream),
        "GroupSendRecv: decoding the arrival"));
    return Launched(wire_gpu::AddRoundingResidual(bf16, x.data<float>(), y.data<float>(), n, stream),
                    "GroupSendRecv: keeping the rounding residual");
  }

  std::vector<int64_t> offsets_;
};

}  // namespace

NEREID_REGISTER_KERNEL("GroupAllGather", kGpu, DT_FLOAT, GroupAllGatherGpuKernel);
NEREID_REGISTER_KERNEL("GroupReduceScatter", kGpu, DT_FLOAT, GroupReduceScatterGpuKernel);
NEREID_REGISTER_KERNEL("GroupAllReduce", kGpu, DT_FLOAT, GroupAllReduceGpuKernel);
NEREID_REGISTER_KERNEL("GroupSendRecv", kGpu, DT_FLOAT, GroupSendRecvGpuKernel);

}  // namespace nereid
