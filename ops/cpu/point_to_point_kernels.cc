// Kernels of Send and Recv (ops/point_to_point_ops.cc). With no peer (the
// whole plan in one process) both are identities. With a peer, each transfer
// is a small header (the value's dims) and then the value, on the worker's
// point-to-point channel, so a Recv learns the batch size from the message;
// a value whose shape the plan knows whole (the parameter server's chunks)
// goes without the header.
// Tags keep transfers apart (point_to_point_tag.h).
//
// A transfer placed on a device (place(comm=device); on the sim, which runs
// these kernels on its memory) is given a collective queue by the executor:
// it is then issued at its place in the rank's order of device transfers
// (phase, channel, sender, receiver; ops/collective_schedule.h:
// IsDeviceTransfer) onto the transfers' stream, one message of the planned
// shape into the preset output, as the GPU kernels issue theirs to NCCL.

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/point_to_point_tag.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

constexpr int kHeaderFloats = 8;  // rank, then up to 7 dims
constexpr int64_t kMaxExactDim = int64_t{1} << 24;  // dims travel as floats

// The dims a header carries, or DataLoss if it is not a header (a corrupted
// or mismatched message must not size an allocation).
absl::StatusOr<std::vector<int64_t>> DimsOfHeader(const std::vector<float>& header) {
  const float rank = header[0];
  if (!(rank >= 0 && rank < kHeaderFloats) || rank != static_cast<float>(static_cast<int>(rank))) {
    return absl::DataLossError(absl::StrCat("the message header says rank ", rank, ": not a Send's header"));
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (size_t i = 0; i < dims.size(); ++i) {
    const float d = header[1 + i];
    if (!(d >= 0 && d < static_cast<float>(kMaxExactDim)) || d != static_cast<float>(static_cast<int64_t>(d))) {
      return absl::DataLossError(absl::StrCat("the message header says dim ", i, " is ", d, ": not a Send's header"));
    }
    dims[i] = static_cast<int64_t>(d);
  }
  return dims;
}

class PointToPointKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    name_ = node.name();
    channel_ = attrs.at("channel")->i();
    peer_ = attrs.at("peer")->i();
    if (peer_ >= 0 && (channel_ < 0 || channel_ >= kMaxPointToPointChannels)) {
      return absl::FailedPreconditionError(absl::StrCat("channel ", channel_, " is outside [0, ", kMaxPointToPointChannels,
                                                        ") (plans number their pairs when they are finished)"));
    }
    return absl::OkStatus();
  }

 protected:
  // The channel, or an error naming the transfer.
  absl::StatusOr<PointToPointChannel*> ChannelOf(OpKernelContext* ctx) const {
    if (ctx->point_to_point() == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(ctx->node().op(), " with rank ", peer_, " but this worker runs alone"));
    }
    return ctx->point_to_point();
  }
  // The header's and the body's options: this pair's tags at this step.
  std::pair<CollectiveOptions, CollectiveOptions> TransferOptions(const OpKernelContext* ctx,
                                                                  PointToPointChannel& channel) const {
    CollectiveOptions head, body;
    head.tag = PointToPointTag(channel_, ctx->step(), true);
    body.tag = PointToPointTag(channel_, ctx->step(), false);
    head.timeout = body.timeout = channel.timeout();
    head.abort = body.abort = channel.abort_signal();
    return {head, body};
  }
  // A transfer placed on a device: `work` issued through `queue` at the
  // transfer's place in the rank's order (the queue knows it).
  void IssueInOrder(OpKernelContext* ctx, CollectiveQueue& queue, CollectiveQueue::Work work,
                    std::function<void(absl::Status)> done, const char* direction) const {
    queue.Submit(ctx->step().issue_key(), static_cast<int>(channel_), std::move(work),
                 Named(std::move(done), direction));
  }
  // The body's options for an ordered transfer: this pair's tag, the queue's bound.
  CollectiveOptions OrderedOptions(const OpKernelContext* ctx, const CollectiveQueue& queue) const {
    CollectiveOptions body;
    body.tag = PointToPointTag(channel_, ctx->step(), false);
    body.timeout = queue.timeout();
    return body;
  }
  // Wraps `done` so an error names the node's end of the transfer.
  std::function<void(absl::Status)> Named(std::function<void(absl::Status)> done, const char* direction) const {
    return [done = std::move(done), what = absl::StrCat(direction, " rank ", peer_)](absl::Status s) {
      if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat(what, ": ", s.message())));
      done(absl::OkStatus());
    };
  }

  std::string name_;
  int64_t channel_ = -1;
  int64_t peer_ = -1;
};

class SendKernel : public PointToPointKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(PointToPointKernel::Init(node, attrs));
    // A shape the plan knows whole travels without a header: the Recv's
    // declared shape is the same (the plan checker compares them).
    if (!node.outputs()[0].shape.HasUnknownDim()) planned_ = node.outputs()[0].shape.dims();
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    const Tensor& x = ctx->input(0);
    absl::Status set = ctx->SetOutput(0, x);
    if (!set.ok() || peer_ < 0) return done(set);
    if (CollectiveQueue* queue = ctx->collectives(); queue != nullptr) {
      if (!planned_.has_value() || x.dims() != *planned_) {
        return done(absl::InternalError(absl::StrCat("a transfer placed on a device needs its planned shape; the "
                                                     "value has ", x.DebugString())));
      }
      auto value = std::make_shared<Tensor>(x);
      return IssueInOrder(
          ctx, *queue,
          [value, peer = static_cast<int>(peer_), body = OrderedOptions(ctx, *queue)](Communicator& comm) {
            return comm.Send(absl::MakeConstSpan(value->data<float>(), value->num_elements()), peer, body);
          },
          std::move(done), "sending to");
    }
    absl::StatusOr<PointToPointChannel*> channel = ChannelOf(ctx);
    if (!channel.ok()) return done(channel.status());
    const std::pair<CollectiveOptions, CollectiveOptions> options = TransferOptions(ctx, **channel);
    const CollectiveOptions head = options.first, body = options.second;
    const int peer = static_cast<int>(peer_);
    auto value = std::make_shared<Tensor>(x);
    if (planned_.has_value()) {
      if (x.dims() != *planned_) {
        return done(absl::InternalError(absl::StrCat("the value has shape ", x.DebugString(), ", not the planned [",
                                                     absl::StrJoin(*planned_, ","), "]")));
      }
      // `value` lives until the transfer is done.
      return (*channel)->SubmitSend(absl::MakeConstSpan(value->data<float>(), value->num_elements()), peer, body,
                                    [value, named = Named(std::move(done), "sending to")](absl::Status s) {
                                      named(std::move(s));
                                    });
    }
    if (x.rank() >= kHeaderFloats) return done(absl::InvalidArgumentError("Send takes values of rank 7 at most"));
    auto header = std::make_shared<std::vector<float>>(kHeaderFloats, 0.0f);
    (*header)[0] = static_cast<float>(x.rank());
    for (int i = 0; i < x.rank(); ++i) {
      if (x.dim(i) >= kMaxExactDim) return done(absl::InvalidArgumentError("Send takes dims below 2^24"));
      (*header)[1 + i] = static_cast<float>(x.dim(i));
    }
    (*channel)->Submit(
        [header, value, peer, head, body](Communicator& comm) {
          RETURN_IF_ERROR(comm.Send(*header, peer, head));
          return comm.Send(absl::MakeConstSpan(value->data<float>(), value->num_elements()), peer, body);
        },
        Named(std::move(done), "sending to"));
  }

 private:
  std::optional<std::vector<int64_t>> planned_;
};

class RecvKernel : public PointToPointKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(PointToPointKernel::Init(node, attrs));
    for (const int64_t d : attrs.at("shape")->shape().dim()) declared_.push_back(d);
    // A shape the plan knows whole comes without a header (see SendKernel::Init).
    planned_ = std::all_of(declared_.begin(), declared_.end(), [](int64_t d) { return d >= 0; });
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    if (peer_ < 0) return done(ctx->SetOutput(0, ctx->input(0)));
    if (CollectiveQueue* queue = ctx->collectives(); queue != nullptr) {
      absl::StatusOr<Tensor*> out = ctx->AllocateOutput(0);
      if (!out.ok()) return done(out.status());
      if (!planned_ || (*out)->dims() != declared_) {
        return done(absl::InternalError(absl::StrCat("a transfer placed on a device needs its planned shape; the "
                                                     "output is ", (*out)->DebugString())));
      }
      auto received = std::make_shared<Tensor>(**out);
      return IssueInOrder(
          ctx, *queue,
          [received, peer = static_cast<int>(peer_), body = OrderedOptions(ctx, *queue)](Communicator& comm) {
            return comm.Recv(absl::MakeSpan(received->data<float>(), received->num_elements()), peer, body);
          },
          std::move(done), "receiving from");
    }
    absl::StatusOr<PointToPointChannel*> channel = ChannelOf(ctx);
    if (!channel.ok()) return done(channel.status());
    const std::pair<CollectiveOptions, CollectiveOptions> options = TransferOptions(ctx, **channel);
    const CollectiveOptions head = options.first, body = options.second;
    const int peer = static_cast<int>(peer_);
    auto received = std::make_shared<Tensor>();
    std::vector<int64_t> declared = declared_;
    auto named = Named(std::move(done), "receiving from");
    auto finish = [ctx, received, named = std::move(named)](absl::Status s) {
      if (s.ok()) ctx->SetRunTimeOutput(0, *received);
      named(std::move(s));
    };
    if (planned_) {  // one message of the planned shape
      absl::StatusOr<Tensor> buffer = Tensor::Allocate(DT_FLOAT, declared);
      if (!buffer.ok()) return finish(buffer.status());
      *received = *std::move(buffer);
      return (*channel)->SubmitRecv(absl::MakeSpan(received->data<float>(), received->num_elements()), peer, body,
                                    std::move(finish));
    }
    (*channel)->Submit(
        [received, peer, head, body, declared](Communicator& comm) -> absl::Status {
          std::vector<float> header(kHeaderFloats);
          RETURN_IF_ERROR(comm.Recv(absl::MakeSpan(header), peer, head));
          ASSIGN_OR_RETURN(std::vector<int64_t> dims, DimsOfHeader(header));
          bool fits = dims.size() == declared.size();
          for (size_t i = 0; fits && i < dims.size(); ++i) fits = declared[i] < 0 || declared[i] == dims[i];
          if (!fits) {
            return absl::InvalidArgumentError(absl::StrCat("the sender's value has shape [", absl::StrJoin(dims, ","),
                                                           "] but the plan says [", absl::StrJoin(declared, ","), "]"));
          }
          ASSIGN_OR_RETURN(*received, Tensor::Allocate(DT_FLOAT, dims));
          return comm.Recv(absl::MakeSpan(received->data<float>(), received->num_elements()), peer, body);
        },
        std::move(finish));
  }

 private:
  std::vector<int64_t> declared_;
  bool planned_ = false;
};

NEREID_REGISTER_KERNEL("Send", kCpu, DT_FLOAT, SendKernel);
NEREID_REGISTER_KERNEL("Recv", kCpu, DT_FLOAT, RecvKernel);

}  // namespace
}  // namespace nereid
