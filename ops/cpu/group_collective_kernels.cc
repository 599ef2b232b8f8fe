// Kernels of the group collectives (ops/group_collective_ops.cc). Each hands
// its transfer to the collective queue of its group (the executor gives the
// kernel the queue its `group` attribute names), keyed by (step, bucket) in
// training and by (evaluation batch, eval_bucket) in evaluation, so every
// member issues the group's collectives in the same order. Asynchronous: the
// node's core runs other nodes meanwhile. GroupIdentity moves nothing forward
// and is a plain pass-through.

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/wire_format.h"
#include "core/status_macros.h"
#include "ops/group_collective_call.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

class GroupCollectiveKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override { return call_.Init(node, attrs); }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    absl::StatusOr<Tensor*> out = ctx->AllocateOutput(0);
    if (!out.ok()) return done(out.status());
    Tensor* y = *out;
    const Tensor& x = ctx->input(0);
    CollectiveQueue* queue = ctx->collectives();
    if (queue == nullptr) {
      if (absl::Status alone = call_.Alone(); !alone.ok()) return done(alone);
      std::memcpy(y->raw(), x.raw(), x.num_bytes());  // a group of one
      return done(absl::OkStatus());
    }
    absl::StatusOr<GroupCollectiveCall::Issue> issue = call_.IssueOf(*ctx, *queue);
    if (!issue.ok()) return done(issue.status());
    // The step's collectives run on the queue's thread after this returns.
    auto input = std::make_shared<Tensor>(x);
    auto output = std::make_shared<Tensor>(*y);
    queue->Submit(
        issue->key, issue->bucket,
        [this, input, output, options = issue->options, step = issue->step](Communicator& comm) {
          RETURN_IF_ERROR(call_.CheckGroupSize(comm));
          return Run(comm, *input, *output, options, step);
        },
        call_.Reported(std::move(done)));
  }

 protected:
  // `step`: the training step (evaluation: the step it follows). `comm` has
  // the group's size.
  virtual absl::Status Run(Communicator& comm, const Tensor& x, Tensor& y, const CollectiveOptions& options,
                           int64_t step) = 0;

 private:
  GroupCollectiveCall call_;
};

class GroupAllGatherKernel : public GroupCollectiveKernel {
  absl::Status Run(Communicator& comm, const Tensor& x, Tensor& y, const CollectiveOptions& options,
                   int64_t step) override {
    return comm.AllGather(absl::MakeConstSpan(x.data<float>(), x.num_elements()),
                          absl::MakeSpan(y.data<float>(), y.num_elements()), options);
  }
};

class GroupReduceScatterKernel : public GroupCollectiveKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(GroupCollectiveKernel::Init(node, attrs));
    reduce_ = attrs.at("reduce")->s() == "avg" ? ReduceOp::kAvg : ReduceOp::kSum;
    return absl::OkStatus();
  }

 private:
  absl::Status Run(Communicator& comm, const Tensor& x, Tensor& y, const CollectiveOptions& options,
                   int64_t step) override {
    return comm.ReduceScatter(absl::MakeConstSpan(x.data<float>(), x.num_elements()),
                              absl::MakeSpan(y.data<float>(), y.num_elements()), reduce_, options);
  }

  ReduceOp reduce_ = ReduceOp::kSum;
};

class GroupAllReduceKernel : public GroupCollectiveKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(GroupCollectiveKernel::Init(node, attrs));
    ASSIGN_OR_RETURN(wire_, ParseWireType(attrs.at("wire")->s()));
    return absl::OkStatus();
  }

 private:
  absl::Status Run(Communicator& comm, const Tensor& x, Tensor& y, const CollectiveOptions& options,
                   int64_t step) override {
    std::memcpy(y.raw(), x.raw(), x.num_bytes());
    CollectiveOptions with_wire = options;
    with_wire.wire = wire_;
    return comm.AllReduce(absl::MakeSpan(y.data<float>(), y.num_elements()), ReduceOp::kSum, with_wire);
  }

  WireType wire_ = WireType::kFloat32;
};

class GroupSendRecvKernel : public GroupCollectiveKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    RETURN_IF_ERROR(GroupCollectiveKernel::Init(node, attrs));
    for (const int64_t o : attrs.at("offsets")->list().i()) offsets_.push_back(o);
    ASSIGN_OR_RETURN(wire_, ParseWireType(attrs.at("wire")->s()));
    return absl::OkStatus();
  }

 private:
  absl::Status Run(Communicator& comm, const Tensor& x, Tensor& y, const CollectiveOptions& options,
                   int64_t step) override {
    const int64_t n = comm.world();
    const int64_t offset = ((offsets_[static_cast<size_t>(step) % offsets_.size()] % n) + n) % n;
    const int to = static_cast<int>((comm.rank() + offset) % n);
    const int from = static_cast<int>((comm.rank() - offset + n) % n);
    absl::Span<const float> send(x.data<float>(), x.num_elements());
    absl::Span<float> received(y.data<float>(), y.num_elements());
    if (wire_ == WireType::kFloat32) return comm.SendRecv(send, to, received, from, options);
    return SendRecvRounded(comm, send, to, received, from, options);
  }

  // The 16-bit codes travel two to a float slot (the communicator moves
  // bytes). y = decoded arrival + (x - decoded x): what rounding took off x
  // stays with its sender, so every member's x is counted once in the sum.
  absl::Status SendRecvRounded(Communicator& comm, absl::Span<const float> x, int to, absl::Span<float> y, int from,
                               const CollectiveOptions& options) {
    const size_t slots = (x.size() + 1) / 2;
    std::vector<uint16_t> codes(2 * slots, 0);
    std::vector<float> out_slots(slots), in_slots(slots);
    EncodeWire(wire_, x, codes.data());
    DecodeWire(wire_, codes.data(), y);
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] - y[i];  // the residual this rank keeps
    std::memcpy(out_slots.data(), codes.data(), slots * sizeof(float));
    RETURN_IF_ERROR(comm.SendRecv(out_slots, to, absl::MakeSpan(in_slots), from, options));
    std::memcpy(codes.data(), in_slots.data(), slots * sizeof(float));
    DecodeWireAdd(wire_, codes.data(), y);
    return absl::OkStatus();
  }

  std::vector<int64_t> offsets_;
  WireType wire_ = WireType::kFloat32;
};

class GroupIdentityKernel : public OpKernel {
 public:
  absl::Status Compute(OpKernelContext* ctx) override { return ctx->SetOutput(0, ctx->input(0)); }
};

NEREID_REGISTER_KERNEL("GroupAllGather", kCpu, DT_FLOAT, GroupAllGatherKernel);
NEREID_REGISTER_KERNEL("GroupReduceScatter", kCpu, DT_FLOAT, GroupReduceScatterKernel);
NEREID_REGISTER_KERNEL("GroupAllReduce", kCpu, DT_FLOAT, GroupAllReduceKernel);
NEREID_REGISTER_KERNEL("GroupIdentity", kCpu, DT_FLOAT, GroupIdentityKernel);
NEREID_REGISTER_KERNEL("GroupSendRecv", kCpu, DT_FLOAT, GroupSendRecvKernel);

}  // namespace
}  // namespace nereid
