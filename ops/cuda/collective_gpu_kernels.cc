// The gradient bucket's allreduce on the GPU (place(device=cuda,
// comm=device)): the bucket's tensors are copied into one device buffer on
// the node's stream (its group's communication stream), and when the
// worker's collective queue issues the bucket, in the same order on every
// rank (schedulers/stream_issued_queue.h), NCCL's allreduce of it and the
// copies back into the outputs are enqueued behind them on that stream. No
// host thread waits for the data: the outputs are marked written by that
// work, and the optimizer's kernels wait for it by event. A 16-bit wire
// (compress(method=fp16|bf16)) is NCCL's allreduce in that type
// (comm/nccl_communicator.h).

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/cuda/gpu_launch.h"

namespace nereid {
namespace {

class AllReduceGpuKernel : public cuda::IssuingKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    bucket_ = static_cast<int>(attrs.at("bucket")->i());
    op_ = attrs.at("reduce")->s() == "sum" ? ReduceOp::kSum : ReduceOp::kAvg;
    ASSIGN_OR_RETURN(wire_, ParseWireType(attrs.at("wire")->s()));
    return absl::OkStatus();
  }

 private:
  // Enqueues the fusing copies and hands the bucket to the queue; an error
  // before the hand-over is returned (`done` not called).
  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    const std::string name = cuda::Prefix(ctx.node());
    std::vector<Tensor*> outputs;
    int64_t total = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      ASSIGN_OR_RETURN(Tensor * out, ctx.AllocateOutput(i));
      outputs.push_back(out);
      total += ctx.input(i).num_elements();
    }
    CollectiveQueue* queue = ctx.collectives();
    if (queue == nullptr) {
      // A worker alone: the reduction over one rank is its own value.
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        RETURN_IF_ERROR(cuda::CopyOnStream(outputs[i]->raw(), ctx.input(i).raw(), ctx.input(i).num_bytes(), stream,
                                           name + "copy"));
      }
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    // The fused buffer is stream-ordered memory: freed when the last copy of
    // this Tensor goes, reused only by the stream's later work.
    ASSIGN_OR_RETURN(Tensor fused, cuda::Scratch(ctx, static_cast<size_t>(total) * sizeof(float)));
    auto buffer = std::make_shared<Tensor>(std::move(fused));
    std::vector<Tensor> views;  // the outputs' blocks, for the copies back
    char* at = static_cast<char*>(buffer->raw());
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const size_t bytes = ctx.input(i).num_bytes();
      RETURN_IF_ERROR(cuda::CopyOnStream(at, ctx.input(i).raw(), bytes, stream, name + "fusing the bucket"));
      at += bytes;
      views.push_back(Tensor::ViewOf(*outputs[i]));
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(bucket_);
    options.timeout = queue->timeout();
    options.wire = wire_;
    queue->Submit(
        ctx.step().step, bucket_,
        [buffer, views, stream, name, op = op_, options](Communicator& comm) -> absl::Status {
          StreamCollectives* on_stream = comm.stream_collectives();
          if (on_stream == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                name, "the worker's communicator (", comm.backend(),
                ") cannot enqueue on a GPU stream: collectives placed on cuda need NCCL"));
          }
          RETURN_IF_ERROR(on_stream->EnqueueAllReduce(
              absl::MakeSpan(buffer->data<float>(), buffer->num_elements()), op, options, stream));
          const char* from = static_cast<const char*>(buffer->raw());
          for (const Tensor& out : views) {
            RETURN_IF_ERROR(cuda::CopyOnStream(const_cast<void*>(out.raw()), from, out.num_bytes(), stream,
                                               name + "splitting the bucket"));
            from += out.num_bytes();
          }
          return absl::OkStatus();
        },
        std::move(done));
    return absl::OkStatus();
  }

  int bucket_ = 0;
  WireType wire_ = WireType::kFloat32;
  ReduceOp op_ = ReduceOp::kAvg;
};

}  // namespace

NEREID_REGISTER_KERNEL("AllReduce", kGpu, DT_FLOAT, AllReduceGpuKernel);

}  // namespace nereid
