// CompressedAllReduce on the GPU (place(device=cuda, comm=device)) for the
// bucketed gather codecs: TernGrad, 1-bit SGD and QSGD's fixed coding
// (ops/cuda/codec_gpu.h). When the worker's collective queue issues the
// node, in its (step, bucket) turn as on the host, each gradient is encoded
// into one fused device buffer on the node's stream (the world's
// communication stream), NCCL all-gathers the buffers, and each gradient's
// average is decoded from every rank's code, in rank order: the same bits
// as the CPU kernel's AverageFused. No host thread waits for the data.
//
// The other codecs (top-k, QSGD's Elias coding, PowerSGD, GradiVeQ) have no
// GPU kernels: `place` names them (KernelCovers), and keeps them on the
// host with fallback=host.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/compressed_gradients.h"
#include "ops/cuda/codec_gpu.h"
#include "ops/cuda/gpu_launch.h"

namespace nereid {
namespace {

using cuda::codecs::Coder;

const std::map<std::string, Coder>& GpuCoders() {
  static const auto* coders =
      new std::map<std::string, Coder>{{"onebit", Coder::kOneBit}, {"qsgd", Coder::kQsgd}, {"terngrad", Coder::kTernGrad}};
  return *coders;
}

// The coder and layout of a gradient's codec, or why it has no GPU kernels.
absl::StatusOr<std::pair<Coder, codes::BucketLayout>> GpuCoderOf(const std::string& method,
                                                                 const GradientCodec& codec) {
  auto coder = GpuCoders().find(method);
  const std::optional<codes::BucketLayout> layout = codec.bucket_layout();
  if (coder == GpuCoders().end() || !layout.has_value()) {
    std::vector<std::string> names;
    for (const auto& [name, c] : GpuCoders()) names.push_back(name);
    return absl::UnimplementedError(absl::StrCat(
        "the ", method, " codec", coder == GpuCoders().end() ? "" : " with these options",
        " has no GPU kernels; the GPU runs the bucketed codes of ", absl::StrJoin(names, ", "),
        " (qsgd with coding=fixed)"));
  }
  return std::make_pair(coder->second, *layout);
}

absl::Status CoversCodecs(const Node& node, const AttrMap& attrs) {
  ASSIGN_OR_RETURN(CompressedGradients codecs, CompressedGradients::Make(node, attrs));
  for (const CompressedGradient& g : codecs.gradients) RETURN_IF_ERROR(GpuCoderOf(codecs.method, *g.codec).status());
  return absl::OkStatus();
}

class CompressedAllReduceGpuKernel : public cuda::IssuingKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(node_, CompressedGradients::Make(node, attrs));
    name_ = cuda::Prefix(node);
    for (const CompressedGradient& g : node_.gradients) {
      ASSIGN_OR_RETURN(auto coder, GpuCoderOf(node_.method, *g.codec));
      Slot slot{coder.first, coder.second, offset_, g.states > 0};
      offset_ += coder.second.Floats();
      encode_scratch_ = std::max(encode_scratch_, cuda::codecs::EncodeScratchBytes(slot.coder, slot.layout));
      slots_.push_back(slot);
    }
    return absl::OkStatus();
  }

 private:
  struct Slot {
    Coder coder;
    codes::BucketLayout layout;
    int64_t offset;     // of its code in the fused buffer
    bool has_residual;  // 1-bit SGD's state
  };

  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    // Outputs: the averages, then each gradient's next state (a copy of its
    // input, updated in place by the encode).
    const int gradients = static_cast<int>(slots_.size());
    auto work = std::make_shared<std::vector<std::pair<const float*, float*>>>();  // (gradient, average)
    auto residuals = std::make_shared<std::vector<float*>>();
    int next_state = gradients;
    for (int g = 0; g < gradients; ++g) {
      ASSIGN_OR_RETURN(Tensor * average, ctx.AllocateOutput(g));
      work->emplace_back(ctx.input(g).data<float>(), average->data<float>());
      float* residual = nullptr;
      for (int k = 0; k < node_.gradients[g].states; ++k, ++next_state) {
        ASSIGN_OR_RETURN(Tensor * next, ctx.AllocateOutput(next_state));
        RETURN_IF_ERROR(cuda::CopyOnStream(next->raw(), ctx.input(next_state).raw(), next->num_bytes(), stream,
                                           name_ + "copying the codec's state"));
        if (k == 0) residual = next->data<float>();
      }
      residuals->push_back(residual);
    }
    CollectiveQueue* queue = ctx.collectives();
    const int world = queue == nullptr ? 1 : queue->world();
    // Stream-ordered scratch: this rank's codes, every rank's, the encode's.
    ASSIGN_OR_RETURN(Tensor fused,
                     cuda::Scratch(ctx, static_cast<size_t>(offset_) * (world == 1 ? 1 : world + 1) * sizeof(float)));
    auto buffer = std::make_shared<Tensor>(std::move(fused));
    auto encode = std::make_shared<Tensor>();
    if (encode_scratch_ > 0) {
      ASSIGN_OR_RETURN(*encode, cuda::Scratch(ctx, encode_scratch_));
    }
    std::vector<CodecStep> steps;
    for (const CompressedGradient& g : node_.gradients) {
      steps.push_back(g.step);
      steps.back().step = ctx.step().step;
    }
    // Encodes this rank's codes, then (`gather`, a world of more than one)
    // all-gathers them, then decodes every gradient's average.
    auto run = [this, work, residuals, buffer, encode, steps, stream, world](
                   int rank, const std::function<absl::Status(float* mine, float* all)>& gather) -> absl::Status {
      float* mine = buffer->data<float>();
      for (size_t g = 0; g < slots_.size(); ++g) {
        const Slot& s = slots_[g];
        RETURN_IF_ERROR(cuda::CudaStatus(
            static_cast<cudaError_t>(cuda::codecs::Encode(s.coder, s.layout, (*work)[g].first, (*residuals)[g],
                                                          steps[g].UniformSeed(rank), encode->raw(),
                                                          encode->num_bytes(), mine + s.offset, stream)),
            name_ + "encoding"));
      }
      float* all = mine;
      if (world > 1) {
        all = mine + offset_;
        RETURN_IF_ERROR(gather(mine, all));
      }
      for (size_t g = 0; g < slots_.size(); ++g) {
        const Slot& s = slots_[g];
        RETURN_IF_ERROR(cuda::CudaStatus(
            static_cast<cudaError_t>(cuda::codecs::DecodeAverage(s.coder, s.layout, all + s.offset, offset_, world,
                                                                 (*work)[g].second, stream)),
            name_ + "decoding"));
      }
      return absl::OkStatus();
    };
    if (queue == nullptr) {  // a worker alone
      RETURN_IF_ERROR(run(0, nullptr));
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(node_.bucket);
    options.timeout = queue->timeout();
    queue->Submit(
        ctx.step().step, node_.bucket,
        [run, stream, options, name = name_, floats = offset_, world](Communicator& comm) -> absl::Status {
          StreamCollectives* on_stream = comm.stream_collectives();
          if (on_stream == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                name, "the worker's communicator (", comm.backend(),
                ") cannot enqueue on a GPU stream: collectives placed on cuda need NCCL"));
          }
          return run(comm.rank(), [&](float* mine, float* all) {
            return on_stream->EnqueueAllGather(absl::MakeConstSpan(mine, floats), absl::MakeSpan(all, floats * world),
                                               options, stream);
          });
        },
        [done = std::move(done), bucket = node_.bucket](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("compressed bucket ", bucket, ": ", s.message())));
          done(absl::OkStatus());
        });
    return absl::OkStatus();
  }

  CompressedGradients node_;
  std::string name_;
  std::vector<Slot> slots_;
  int64_t offset_ = 0;  // the floats of one rank's fused codes
  size_t encode_scratch_ = 0;
};

}  // namespace

NEREID_REGISTER_KERNEL_COVERING("CompressedAllReduce", kGpu, DT_FLOAT, CompressedAllReduceGpuKernel, CoversCodecs);

}  // namespace nereid
