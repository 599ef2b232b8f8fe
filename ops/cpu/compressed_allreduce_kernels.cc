// The CompressedAllReduce kernel: runs the node's gradient codec
// (runtime/compress/codec.h) on the collective engine's thread, in the
// node's bucket turn, so compressed gradients keep the fixed per-step order
// of every other collective. Outputs: the average, then the codec's next
// state (a copy of the state input that the codec updates in place).

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "graph/status_macros.h"
#include "ops/kernel.h"
#include "runtime/collective_engine.h"
#include "runtime/compress/codec.h"
#include "runtime/compress/communicator_codec_comm.h"

namespace nereid {
namespace {

class CompressedAllReduceKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    bucket_ = static_cast<int>(attrs.at("bucket")->i());
    step_.layer = attrs.at("layer")->i();
    step_.seed = attrs.at("seed")->i();
    const std::string& method = attrs.at("method")->s();
    ASSIGN_OR_RETURN(codec_, CodecRegistry::Global().Create(method));
    ASSIGN_OR_RETURN(CodecOptions options, CodecOptions::Parse(attrs.at("options")->s()));
    const TensorShape& shape = node.outputs()[0].shape;
    if (!shape.IsFullyDefined()) {
      return absl::FailedPreconditionError(absl::StrCat("'", node.name(), "': the gradient's shape must be known"));
    }
    const std::vector<int64_t>& dims = shape.dims();
    if (absl::Status s = codec_->Init(dims, options); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("'", node.name(), "' (", method, "): ", s.message()));
    }
    size_t expected = codec_->State().size();
    if (static_cast<size_t>(node.num_inputs()) != 1 + expected) {
      return absl::FailedPreconditionError(absl::StrCat("'", node.name(), "': codec ", method, " keeps ", expected,
                                                        " state tensors but the node has ", node.num_inputs() - 1));
    }
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    std::vector<absl::Span<float>> state;
    absl::StatusOr<Tensor*> average = ctx->AllocateOutput(0);
    if (!average.ok()) return done(average.status());
    for (int i = 1; i < ctx->num_inputs(); ++i) {
      absl::StatusOr<Tensor*> next = ctx->AllocateOutput(i);
      if (!next.ok()) return done(next.status());
      std::memcpy((*next)->data<float>(), ctx->input(i).data<float>(), ctx->input(i).num_bytes());
      state.push_back(absl::MakeSpan((*next)->data<float>(), (*next)->num_elements()));
    }
    absl::Span<const float> gradient(ctx->input(0).data<float>(), ctx->input(0).num_elements());
    absl::Span<float> out((*average)->data<float>(), (*average)->num_elements());
    CodecStep step = step_;
    step.step = ctx->step().step;
    CollectiveEngine* engine = ctx->collectives();
    if (engine == nullptr) {
      LocalCodecComm alone;
      std::lock_guard<std::mutex> lock(alone_mu_);  // pipelined steps may overlap here
      return done(codec_->Average(step, gradient, std::move(state), out, alone));
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(bucket_);
    options.timeout = engine->timeout();
    GradientCodec* codec = codec_.get();
    engine->Submit(
        step.step, bucket_,
        [codec, step, gradient, state = std::move(state), out, options, engine](Communicator& comm) {
          CommunicatorCodecComm codec_comm(comm, options);
          absl::Time start = absl::Now();
          absl::Status s = codec->Average(step, gradient, state, out, codec_comm);
          engine->AddCodecTime(absl::Now() - start - codec_comm.in_collectives());
          return s;
        },
        [done = std::move(done), bucket = bucket_](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("compressed bucket ", bucket, ": ", s.message())));
          done(absl::OkStatus());
        });
  }

 private:
  int bucket_ = 0;
  CodecStep step_;
  std::unique_ptr<GradientCodec> codec_;
  std::mutex alone_mu_;
};

NEREID_REGISTER_KERNEL("CompressedAllReduce", kCpu, DT_FLOAT, CompressedAllReduceKernel);

}  // namespace
}  // namespace nereid
