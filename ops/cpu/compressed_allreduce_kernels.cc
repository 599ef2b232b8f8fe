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
#include "ops/compressed_gradients.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

class CompressedAllReduceKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(node_, CompressedGradients::Make(node, attrs));
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    // Inputs: the gradients, then each gradient's state in turn; outputs the
    // same: the averages, then the next state (copied, updated in place).
    std::vector<FusedGradient> fused;
    const std::vector<CompressedGradient>& slots = node_.gradients;
    int next_state = static_cast<int>(slots.size());
    for (size_t g = 0; g < slots.size(); ++g) {
      absl::StatusOr<Tensor*> average = ctx->AllocateOutput(static_cast<int>(g));
      if (!average.ok()) return done(average.status());
      FusedGradient f{slots[g].codec.get(), slots[g].step,
                      absl::Span<const float>(ctx->input(g).data<float>(), ctx->input(g).num_elements()),
                      {},
                      absl::MakeSpan((*average)->data<float>(), (*average)->num_elements())};
      f.step.step = ctx->step().step;
      for (int k = 0; k < slots[g].states; ++k, ++next_state) {
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
    options.tag = static_cast<uint32_t>(node_.bucket);
    options.timeout = engine->timeout();
    engine->Submit(
        ctx->step().step, node_.bucket,
        [fused = std::move(fused), options, engine](Communicator& comm) mutable {
          CommunicatorCodecComm codec_comm(comm, options);
          absl::Time start = absl::Now();
          absl::Status s = AverageFused(fused, codec_comm);
          engine->AddCodecTime(absl::Now() - start - codec_comm.in_collectives());
          return s;
        },
        [done = std::move(done), bucket = node_.bucket](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("compressed bucket ", bucket, ": ", s.message())));
          done(absl::OkStatus());
        });
  }

 private:
  CompressedGradients node_;
  std::mutex alone_mu_;
};

NEREID_REGISTER_KERNEL("CompressedAllReduce", kCpu, DT_FLOAT, CompressedAllReduceKernel);

}  // namespace
}  // namespace nereid
