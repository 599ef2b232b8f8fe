// The CompressedAllReduce kernel: runs the node's gradient codecs
// (compress/codec.h), one per gradient, fused into one collective per
// round (AverageFused), on the collective engine's thread in the node's
// bucket turn, so compressed gradients keep the fixed per-step order of
// every other collective.

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compress/codec.h"
#include "compress/communicator_codec_comm.h"
#include "core/status_macros.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

class CompressedAllReduceKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    bucket_ = static_cast<int>(attrs.at("bucket")->i());
    const int64_t gradients = attrs.at("gradients")->i();
    const std::string& method = attrs.at("method")->s();
    ASSIGN_OR_RETURN(CodecOptions options, CodecOptions::Parse(attrs.at("options")->s()));
    int64_t state_inputs = 0;
    for (int64_t g = 0; g < gradients; ++g) {
      const TensorShape& shape = node.outputs()[g].shape;
      if (!shape.IsFullyDefined()) {
        return absl::FailedPreconditionError(absl::StrCat("'", node.name(), "': gradient ", g, "'s shape must be known"));
      }
      ASSIGN_OR_RETURN(std::unique_ptr<GradientCodec> codec, CodecRegistry::Global().Create(method));
      if (absl::Status s = codec->Init(shape.dims(), options); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("'", node.name(), "' (", method, ") gradient ", g, ": ", s.message()));
      }
      Slot slot;
      slot.step.layer = attrs.at("layer")->i() + g;
      slot.step.seed = attrs.at("seed")->i();
      slot.states = static_cast<int>(codec->State().size());
      state_inputs += slot.states;
      slot.codec = std::move(codec);
      slots_.push_back(std::move(slot));
    }
    if (gradients < 1 || node.num_inputs() != gradients + state_inputs) {
      return absl::FailedPreconditionError(absl::StrCat("'", node.name(), "': ", gradients, " gradients whose ", method,
                                                        " codecs keep ", state_inputs, " state tensors, but the node has ",
                                                        node.num_inputs(), " inputs"));
    }
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    // Inputs: the gradients, then each gradient's state in turn; outputs the
    // same: the averages, then the next state (copied, updated in place).
    std::vector<FusedGradient> fused;
    int next_state = static_cast<int>(slots_.size());
    for (size_t g = 0; g < slots_.size(); ++g) {
      absl::StatusOr<Tensor*> average = ctx->AllocateOutput(static_cast<int>(g));
      if (!average.ok()) return done(average.status());
      FusedGradient f{slots_[g].codec.get(), slots_[g].step,
                      absl::Span<const float>(ctx->input(g).data<float>(), ctx->input(g).num_elements()),
                      {},
                      absl::MakeSpan((*average)->data<float>(), (*average)->num_elements())};
      f.step.step = ctx->step().step;
      for (int k = 0; k < slots_[g].states; ++k, ++next_state) {
        absl::StatusOr<Tensor*> next = ctx->AllocateOutput(next_state);
        if (!next.ok()) return done(next.status());
        std::memcpy((*next)->data<float>(), ctx->input(next_state).data<float>(), ctx->input(next_state).num_bytes());
        f.state.push_back(absl::MakeSpan((*next)->data<float>(), (*next)->num_elements()));
      }
      fused.push_back(std::move(f));
    }
    CollectiveQueue* engine = ctx->collectives();
    if (engine == nullptr) {
      LocalCodecComm alone;
      std::lock_guard<std::mutex> lock(alone_mu_);  // pipelined steps may overlap here
      return done(AverageFused(fused, alone));
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(bucket_);
    options.timeout = engine->timeout();
    engine->Submit(
        ctx->step().step, bucket_,
        [fused = std::move(fused), options, engine](Communicator& comm) mutable {
          CommunicatorCodecComm codec_comm(comm, options);
          absl::Time start = absl::Now();
          absl::Status s = AverageFused(fused, codec_comm);
          engine->AddCodecTime(absl::Now() - start - codec_comm.in_collectives());
          return s;
        },
        [done = std::move(done), bucket = bucket_](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("compressed bucket ", bucket, ": ", s.message())));
          done(absl::OkStatus());
        });
  }

 private:
  struct Slot {
    std::unique_ptr<GradientCodec> codec;
    CodecStep step;  // layer and seed; the step is set per run
    int states = 0;
  };
  int bucket_ = 0;
  std::vector<Slot> slots_;
  std::mutex alone_mu_;
};

NEREID_REGISTER_KERNEL("CompressedAllReduce", kCpu, DT_FLOAT, CompressedAllReduceKernel);

}  // namespace
}  // namespace nereid
