// CompressedAllReduce on the GPU (place(device=cuda, comm=device)) for the
// gather codecs with GPU kernels: TernGrad, 1-bit SGD, QSGD's fixed coding
// and top-k (ops/cuda/gpu_codecs.h). When the worker's collective queue issues the
// node, in its (step, bucket) turn as on the host, each gradient is encoded
// into one fused device buffer on the node's stream (the world's
// communication stream), NCCL all-gathers the buffers, and each gradient's
// average is decoded from every rank's code, in rank order: the same bits
// as the CPU kernel's AverageFused. No host thread waits for the data.
//
// The other codecs (QSGD's Elias coding, PowerSGD, GradiVeQ) have no GPU
// kernels: `place` names them (KernelCovers), and keeps them on the host
// with fallback=host, where the world's collectives then run split
// (ops/collective_schedule.h: SplitAcrossSides).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "ops/compressed_gradients.h"
#include "ops/cuda/gpu_codecs.h"
#include "ops/cuda/gpu_launch.h"

namespace nereid {
namespace {

absl::Status CoversCodecs(const Node& node, const AttrMap& attrs) {
  ASSIGN_OR_RETURN(CompressedGradients codecs, CompressedGradients::Make(node, attrs));
  for (const CompressedGradient& g : codecs.gradients) {
    RETURN_IF_ERROR(cuda::MakeGpuCodec(codecs.method, *g.codec, g.elements).status());
  }
  return absl::OkStatus();
}

class CompressedAllReduceGpuKernel : public cuda::IssuingKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(node_, CompressedGradients::Make(node, attrs));
    name_ = cuda::Prefix(node);
    for (const CompressedGradient& g : node_.gradients) {
      ASSIGN_OR_RETURN(std::unique_ptr<cuda::GpuCodec> codec, cuda::MakeGpuCodec(node_.method, *g.codec, g.elements));
      encode_scratch_ = std::max(encode_scratch_, codec->scratch_bytes());
      slots_.push_back(Slot{std::move(codec), offset_});
      offset_ += slots_.back().codec->floats();
    }
    return absl::OkStatus();
  }

 private:
  struct Slot {
    std::unique_ptr<cuda::GpuCodec> codec;
    int64_t offset;  // of its code in the fused buffer
  };

  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    // Outputs: the averages, then each gradient's next state (a copy of its
    // input, updated in place by the encode).
    const int gradients = static_cast<int>(slots_.size());
    struct Gradient {
      const float* g;
      float* average;
      std::vector<float*> state;
    };
    auto work = std::make_shared<std::vector<Gradient>>();
    int next_state = gradients;
    for (int g = 0; g < gradients; ++g) {
      ASSIGN_OR_RETURN(Tensor * average, ctx.AllocateOutput(g));
      Gradient gradient{ctx.input(g).data<float>(), average->data<float>(), {}};
      for (int k = 0; k < node_.gradients[g].states; ++k, ++next_state) {
        ASSIGN_OR_RETURN(Tensor * next, ctx.AllocateOutput(next_state));
        RETURN_IF_ERROR(cuda::CopyOnStream(next->raw(), ctx.input(next_state).raw(), next->num_bytes(), stream,
                                           name_ + "copying the codec's state"));
        gradient.state.push_back(next->data<float>());
      }
      work->push_back(std::move(gradient));
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
    auto run = [this, work, buffer, encode, steps, stream, world](
                   int rank, const std::function<absl::Status(float* mine, float* all)>& gather) -> absl::Status {
      // The queue's thread launches here: the stream's GPU must be current.
      int device = 0;
      RETURN_IF_ERROR(cuda::CudaStatus(cudaStreamGetDevice(stream, &device), name_ + "cudaStreamGetDevice"));
      RETURN_IF_ERROR(cuda::CudaStatus(cudaSetDevice(device), name_ + "cudaSetDevice"));
      float* mine = buffer->data<float>();
      for (size_t g = 0; g < slots_.size(); ++g) {
        const Slot& s = slots_[g];
        RETURN_IF_ERROR(cuda::CudaStatus(
            static_cast<cudaError_t>(s.codec->Encode((*work)[g].g, (*work)[g].state, steps[g].UniformSeed(rank),
                                                     encode->raw(), mine + s.offset, stream)),
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
            static_cast<cudaError_t>(s.codec->DecodeAverage(all + s.offset, offset_, world, (*work)[g].average, stream)),
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
