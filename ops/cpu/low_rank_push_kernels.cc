// The LowRankPush kernel (ops/low_rank_push_ops.cc): encodes the push with
// compress/low_rank_push.h on the gossip group's collective queue, in the
// node's bucket turn, sends it to this step's out-neighbour while receiving
// the in-neighbour's, and decodes that. The state inputs are copied to the
// state outputs and updated there; only the step's slot changes.

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compress/low_rank_push.h"
#include "core/status_macros.h"
#include "ops/kernel.h"
#include "ops/low_rank_push_node.h"

namespace nereid {
namespace {

class LowRankPushKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(node_, LowRankPushNode::Make(node, attrs));
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    CollectiveQueue* queue = ctx->collectives();
    if (absl::Status s = node_.CheckLaunch(ctx->step().training, queue != nullptr); !s.ok()) return done(s);
    // Outputs: y, then the state, copied from the inputs and updated in place.
    std::vector<std::shared_ptr<Tensor>> out;
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<Tensor*> t = ctx->AllocateOutput(i);
      if (!t.ok()) return done(t.status());
      if (i > 0) std::memcpy((*t)->raw(), ctx->input(i).raw(), ctx->input(i).num_bytes());
      out.push_back(std::make_shared<Tensor>(**t));
    }
    auto x = std::make_shared<Tensor>(ctx->input(0));
    if (queue == nullptr) {
      std::memcpy(out[0]->raw(), x->raw(), x->num_bytes());  // a group of one keeps its value
      return done(absl::OkStatus());
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(node_.bucket);
    options.timeout = queue->timeout();
    const int64_t step = ctx->step().step;
    queue->Submit(
        step, node_.bucket,
        [this, x, out, options, step](Communicator& comm) { return Run(comm, *x, out, options, step); },
        [done = std::move(done), group = node_.group](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("LowRankPush on group '", group, "': ", s.message())));
          done(absl::OkStatus());
        });
  }

 private:
  absl::Status Run(Communicator& comm, const Tensor& x, const std::vector<std::shared_ptr<Tensor>>& out,
                   const CollectiveOptions& options, int64_t step) {
    RETURN_IF_ERROR(node_.CheckWorld(comm.world()));
    const LowRankPush& push = *node_.push;
    const LowRankPushNode::Edge edge = node_.EdgeAt(step, comm.rank(), comm.world());
    const int64_t size = push.elements(), slots = node_.slots();
    float* y = out[0]->data<float>();
    float* sent = out[1]->data<float>() + edge.slot * size;
    float* received = out[2]->data<float>() + edge.slot * size;
    float* basis = out[3]->data<float>() + edge.slot * push.basis_floats();
    float* started = out[4]->data<float>();
    // An edge's two ends start on the same step, so each knows the other's size.
    const bool out_started = started[edge.slot] != 0, in_started = started[slots + edge.slot] != 0;
    std::vector<float> message(push.MessageFloats(out_started)), arrival(push.MessageFloats(in_started));
    push.Encode(absl::MakeConstSpan(x.data<float>(), size), out_started, edge.seed, absl::MakeSpan(sent, size),
                absl::MakeSpan(basis, push.basis_floats()), absl::MakeSpan(message));
    RETURN_IF_ERROR(comm.SendRecv(message, edge.to, absl::MakeSpan(arrival), edge.from, options));
    push.Decode(arrival, in_started, absl::MakeSpan(received, size));
    started[edge.slot] = started[slots + edge.slot] = 1.0f;
    // x moved by `consensus` of the decoded difference (1: what arrived plus
    // what this rank's own push did not carry, exact push-sum's y).
    LowRankPush::Mix(absl::MakeConstSpan(x.data<float>(), size), absl::MakeConstSpan(received, size),
                     absl::MakeConstSpan(sent, size), node_.consensus, absl::MakeSpan(y, size));
    return absl::OkStatus();
  }

  LowRankPushNode node_;
};

NEREID_REGISTER_KERNEL("LowRankPush", kCpu, DT_FLOAT, LowRankPushKernel);

}  // namespace
}  // namespace nereid
