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

namespace nereid {
namespace {

class LowRankPushKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    group_ = attrs.at("group")->s();
    group_size_ = attrs.at("group_size")->i();
    bucket_ = static_cast<int>(attrs.at("bucket")->i());
    seed_ = static_cast<uint64_t>(attrs.at("seed")->i());
    consensus_ = attrs.at("consensus")->f();
    for (const int64_t o : attrs.at("offsets")->list().i()) offsets_.push_back(o);
    const auto& s = attrs.at("segments")->list().i();
    std::vector<PushSegment> segments;
    for (int i = 0; i + 2 < s.size(); i += 3) segments.push_back({s[i], s[i + 1], s[i + 2]});
    absl::StatusOr<LowRankPush> push = LowRankPush::Create(std::move(segments));
    if (!push.ok()) return absl::Status(push.status().code(), absl::StrCat("'", node.name(), "': ", push.status().message()));
    push_ = std::make_shared<const LowRankPush>(*std::move(push));
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    if (!ctx->step().training) {
      return done(absl::FailedPreconditionError(absl::StrCat("LowRankPush on group '", group_,
                                                             "' runs in training steps only")));
    }
    // Outputs: y, then the state, copied from the inputs and updated in place.
    std::vector<std::shared_ptr<Tensor>> out;
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<Tensor*> t = ctx->AllocateOutput(i);
      if (!t.ok()) return done(t.status());
      if (i > 0) std::memcpy((*t)->raw(), ctx->input(i).raw(), ctx->input(i).num_bytes());
      out.push_back(std::make_shared<Tensor>(**t));
    }
    auto x = std::make_shared<Tensor>(ctx->input(0));
    CollectiveQueue* queue = ctx->collectives();
    if (queue == nullptr) {
      if (group_size_ != 1) {
        return done(absl::FailedPreconditionError(absl::StrCat(
            "group '", group_, "' has ", group_size_, " ranks but this worker has no communicator for it")));
      }
      std::memcpy(out[0]->raw(), x->raw(), x->num_bytes());  // a group of one keeps its value
      return done(absl::OkStatus());
    }
    if (bucket_ < 0) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "LowRankPush on group '", group_, "' has no place in the group's step order (was the plan edited by hand?)")));
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(bucket_);
    options.timeout = queue->timeout();
    const int64_t step = ctx->step().step;
    queue->Submit(
        step, bucket_, [this, x, out, options, step](Communicator& comm) { return Run(comm, *x, out, options, step); },
        [done = std::move(done), group = group_](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("LowRankPush on group '", group, "': ", s.message())));
          done(absl::OkStatus());
        });
  }

 private:
  absl::Status Run(Communicator& comm, const Tensor& x, const std::vector<std::shared_ptr<Tensor>>& out,
                   const CollectiveOptions& options, int64_t step) {
    if (comm.world() != group_size_) {
      return absl::FailedPreconditionError(
          absl::StrCat("the plan says the group has ", group_size_, " ranks but its communicator has ", comm.world()));
    }
    const int64_t n = comm.world();
    const int64_t slots = static_cast<int64_t>(offsets_.size());
    const int64_t slot = step % slots;
    const int64_t offset = ((offsets_[static_cast<size_t>(slot)] % n) + n) % n;
    const int to = static_cast<int>((comm.rank() + offset) % n);
    const int from = static_cast<int>((comm.rank() - offset + n) % n);
    const int64_t size = push_->elements();
    float* y = out[0]->data<float>();
    float* sent = out[1]->data<float>() + slot * size;
    float* received = out[2]->data<float>() + slot * size;
    float* basis = out[3]->data<float>() + slot * push_->basis_floats();
    float* started = out[4]->data<float>();
    // An edge's two ends start on the same step, so each knows the other's size.
    const bool out_started = started[slot] != 0, in_started = started[slots + slot] != 0;
    std::vector<float> message(push_->MessageFloats(out_started)), arrival(push_->MessageFloats(in_started));
    const uint64_t seed = seed_ * 1000003u + static_cast<uint64_t>(step) * 8191u + static_cast<uint64_t>(comm.rank());
    push_->Encode(absl::MakeConstSpan(x.data<float>(), size), out_started, seed, absl::MakeSpan(sent, size),
                  absl::MakeSpan(basis, push_->basis_floats()), absl::MakeSpan(message));
    RETURN_IF_ERROR(comm.SendRecv(message, to, absl::MakeSpan(arrival), from, options));
    push_->Decode(arrival, in_started, absl::MakeSpan(received, size));
    started[slot] = started[slots + slot] = 1.0f;
    // x moved by `consensus` of the decoded difference (1: what arrived plus
    // what this rank's own push did not carry, exact push-sum's y).
    const float* xs = x.data<float>();
    for (int64_t i = 0; i < size; ++i) y[i] = xs[i] + consensus_ * (received[i] - sent[i]);
    return absl::OkStatus();
  }

  std::string group_;
  int64_t group_size_ = 1;
  int bucket_ = -1;
  uint64_t seed_ = 1;
  float consensus_ = 1.0f;
  std::vector<int64_t> offsets_;
  std::shared_ptr<const LowRankPush> push_;
};

NEREID_REGISTER_KERNEL("LowRankPush", kCpu, DT_FLOAT, LowRankPushKernel);

}  // namespace
}  // namespace nereid
