// Send and Recv on the GPU (place(device=cuda, comm=device), for transfers
// whose shape the plan knows whole: the parameter server's chunks, ...).
// The executor gives such a transfer the rank's transfer queue, which issues
// it at its place in the rank's order of device transfers
// (ops/collective_schedule.h: NCCL matches transfers by
// issue order, not by tag); when issued, ncclSend or ncclRecv is enqueued on
// the transfers' communication stream through their NCCL communicator,
// reading the input or writing the preset output in place. A Send's output
// is its input (a copy on the stream), as on the host. No host thread waits
// for the data. Without a peer both are that copy.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/point_to_point_tag.h"
#include "ops/cuda/gpu_launch.h"

namespace nereid {
namespace {

class PointToPointGpuKernel : public cuda::IssuingKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    name_ = cuda::Prefix(node);
    channel_ = attrs.at("channel")->i();
    peer_ = attrs.at("peer")->i();
    send_ = node.op() == "Send";
    if (peer_ >= 0 && node.outputs()[0].shape.HasUnknownDim()) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, "a transfer on the GPU needs the shape its value will have (its dims cannot come with the "
                 "message into memory allocated before it runs); the plan has ",
          node.outputs()[0].shape.ToString()));
    }
    planned_ = node.outputs()[0].shape.dims();
    return absl::OkStatus();
  }

 private:
  // Hands the transfer to the queue; an error before the hand-over is
  // returned (`done` not called).
  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    ASSIGN_OR_RETURN(Tensor * y, ctx.AllocateOutput(0));
    // A Recv with a peer has no input (its Send is on the peer's part).
    Tensor input;
    if (send_ || peer_ < 0) {  // the value passes through
      const Tensor& x = ctx.input(0);
      if (peer_ >= 0 && x.dims() != planned_) {  // the peer's Recv takes the planned shape's count
        return absl::InternalError(absl::StrCat(name_, "the value has shape ", x.DebugString(), ", not the planned [",
                                                absl::StrJoin(planned_, ","), "]"));
      }
      RETURN_IF_ERROR(cuda::CopyOnStream(y->raw(), x.raw(), x.num_bytes(), stream, name_ + "passing the value"));
      input = Tensor::ViewOf(x);
    }
    if (peer_ < 0) {
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    CollectiveQueue* queue = ctx.collectives();
    if (queue == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(name_, "to rank ", peer_, ", but this worker runs alone"));
    }
    CollectiveOptions options;
    options.tag = PointToPointTag(channel_, ctx.step(), false);
    options.timeout = queue->timeout();
    // The node is not done before its transfer is issued, so its input and
    // output live until then; the stream's order keeps them for the transfer.
    queue->Submit(
        ctx.step().issue_key(), static_cast<int>(channel_),
        [this, input = std::move(input), output = Tensor::ViewOf(*y), options, stream](Communicator& comm) mutable
        -> absl::Status {
          StreamCollectives* on_stream = comm.stream_collectives();
          if (on_stream == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                name_, "the transfers' communicator (", comm.backend(),
                ") cannot enqueue on a GPU stream: transfers placed on cuda need NCCL"));
          }
          const int peer = static_cast<int>(peer_);
          if (peer == comm.rank()) {
            // NCCL meets a rank's send to itself only inside one group call with its receive.
            return absl::UnimplementedError(absl::StrCat(
                name_, "a transfer to its own rank on the GPU is not built; the colocated servers exchange through "
                       "collectives instead (parameter_server(colocated=true,exchange=collective))"));
          }
          if (send_) {
            return on_stream->EnqueueSend(absl::MakeConstSpan(input.data<float>(), input.num_elements()), peer,
                                          options, stream);
          }
          return on_stream->EnqueueRecv(absl::MakeSpan(output.data<float>(), output.num_elements()), peer, options,
                                        stream);
        },
        [name = name_, what = absl::StrCat(send_ ? "sending to rank " : "receiving from rank ", peer_),
         done = std::move(done)](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat(name, what, ": ", s.message())));
          done(absl::OkStatus());
        });
    return absl::OkStatus();
  }

  std::string name_;
  int64_t channel_ = -1;
  int64_t peer_ = -1;
  bool send_ = false;
  std::vector<int64_t> planned_;  // the value's shape, for a transfer with a peer
};

}  // namespace

NEREID_REGISTER_KERNEL("Send", kGpu, DT_FLOAT, PointToPointGpuKernel);
NEREID_REGISTER_KERNEL("Recv", kGpu, DT_FLOAT, PointToPointGpuKernel);

}  // namespace nereid
