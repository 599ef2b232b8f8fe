// CompressedAllReduce on the GPU (place(device=cuda, comm=device)) for the
// codecs with GPU kernels (ops/cuda/gpu_codecs.h): TernGrad, 1-bit SGD,
// QSGD's fixed coding and top-k, all-gathered; PowerSGD, summed. When the
// worker's collective queue issues the node, in its (step, bucket) turn as
// on the host, each round puts every gradient's part into one fused device
// buffer on the node's stream (the world's communication stream), NCCL
// sums or all-gathers it, and every gradient absorbs the result, as the CPU
// kernel's AverageFused does: the same bits, but for NCCL's own order of
// summing a summed codec's parts across more than two ranks. No host thread
// waits for the data.
//
// The other codecs (QSGD's Elias coding, GradiVeQ) have no GPU kernels:
// `place` names them (KernelCovers), and keeps them on the host with
// fallback=host, where the world's collectives then run split
// (ops/collective_schedule.h: SplitAcrossSides).

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
      const size_t bytes = (codec->scratch_bytes() + 255) / 256 * 256;  // aligned for the next
      if (codec->rounds() == 1) {  // used within its round only: one region serves every gradient in turn
        slots_.push_back(Slot{std::move(codec), 0});
        scratch_bytes_ = std::max(scratch_bytes_, bytes);
      } else {  // kept between the rounds (PowerSGD's P): a region each
        slots_.push_back(Slot{std::move(codec), scratch_bytes_});
        scratch_bytes_ += bytes;
      }
    }
    // One method, so one kind of combining and one count of rounds.
    summed_ = slots_.front().codec->summed();
    for (int round = 0; round < slots_.front().codec->rounds(); ++round) {
      std::vector<int64_t> offsets;
      int64_t floats = 0;
      for (const Slot& s : slots_) {
        offsets.push_back(floats);
        floats += s.codec->round_floats(round);
      }
      rounds_.push_back(Round{std::move(offsets), floats});
      most_floats_ = std::max(most_floats_, floats);
    }
    return absl::OkStatus();
  }

 private:
  struct Slot {
    std::unique_ptr<cuda::GpuCodec> codec;
    size_t scratch_at;  // of its scratch, kept through the step's rounds
  };
  struct Round {
    std::vector<int64_t> offsets;  // of each gradient's part in the fused buffer
    int64_t floats;                // one rank's
  };

  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    // Outputs: the averages, then each gradient's next state (a copy of its
    // input, updated in place by the rounds).
    const int gradients = static_cast<int>(slots_.size());
    struct Gradient {
      const float* g;
      float* average;
      std::vector<float*> state;
      CodecStep step;
    };
    auto work = std::make_shared<std::vector<Gradient>>();
    int next_state = gradients;
    for (int g = 0; g < gradients; ++g) {
      ASSIGN_OR_RETURN(Tensor * average, ctx.AllocateOutput(g));
      Gradient gradient{ctx.input(g).data<float>(), average->data<float>(), {}, node_.gradients[g].step};
      gradient.step.step = ctx.step().step;
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
    // Stream-ordered scratch: this rank's parts (and every rank's, gathered),
    // and the codecs' own.
    const int64_t fused_floats = most_floats_ * (summed_ || world == 1 ? 1 : world + 1);
    ASSIGN_OR_RETURN(Tensor fused, cuda::Scratch(ctx, static_cast<size_t>(fused_floats) * sizeof(float)));
    auto buffer = std::make_shared<Tensor>(std::move(fused));
    auto scratch = std::make_shared<Tensor>();
    if (scratch_bytes_ > 0) {
      ASSIGN_OR_RETURN(*scratch, cuda::Scratch(ctx, scratch_bytes_));
    }
    // Each round: every gradient's part into the fused buffer, then
    // (`combine`, a world of more than one) summed or all-gathered, then
    // absorbed by every gradient.
    using Combine = std::function<absl::Status(float* mine, int64_t floats, float* all)>;
    auto run = [this, work, buffer, scratch, stream, world](int rank, const Combine& combine) -> absl::Status {
      // The queue's thread launches here: the stream's GPU must be current.
      int device = 0;
      RETURN_IF_ERROR(cuda::CudaStatus(cudaStreamGetDevice(stream, &device), name_ + "cudaStreamGetDevice"));
      RETURN_IF_ERROR(cuda::CudaStatus(cudaSetDevice(device), name_ + "cudaSetDevice"));
      float* mine = buffer->data<float>();
      char* own = static_cast<char*>(scratch->raw());
      for (int round = 0; round < static_cast<int>(rounds_.size()); ++round) {
        const Round& r = rounds_[round];
        for (size_t g = 0; g < slots_.size(); ++g) {
          const Gradient& w = (*work)[g];
          RETURN_IF_ERROR(cuda::CudaStatus(
              static_cast<cudaError_t>(slots_[g].codec->Contribute(round, w.step, rank, w.g, w.state,
                                                                   own + slots_[g].scratch_at, mine + r.offsets[g],
                                                                   stream)),
              absl::StrCat(name_, "round ", round, " of gradient ", g)));
        }
        float* all = mine;
        if (world > 1) {
          if (!summed_) all = mine + r.floats;
          RETURN_IF_ERROR(combine(mine, r.floats, all));
        }
        for (size_t g = 0; g < slots_.size(); ++g) {
          const Gradient& w = (*work)[g];
          RETURN_IF_ERROR(cuda::CudaStatus(
              static_cast<cudaError_t>(slots_[g].codec->Absorb(round, all + r.offsets[g], r.floats, world, w.state,
                                                               own + slots_[g].scratch_at, w.average, stream)),
              absl::StrCat(name_, "absorbing round ", round, " of gradient ", g)));
        }
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
        [run, stream, options, name = name_, summed = summed_, world](Communicator& comm) -> absl::Status {
          StreamCollectives* on_stream = comm.stream_collectives();
          if (on_stream == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                name, "the worker's communicator (", comm.backend(),
                ") cannot enqueue on a GPU stream: collectives placed on cuda need NCCL"));
          }
          return run(comm.rank(), [&](float* mine, int64_t floats, float* all) {
            if (summed) return on_stream->EnqueueAllReduce(absl::MakeSpan(mine, floats), ReduceOp::kSum, options, stream);
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
  std::vector<Round> rounds_;
  bool summed_ = false;
  int64_t most_floats_ = 0;   // one rank's fused parts in its largest round
  size_t scratch_bytes_ = 0;  // every gradient's own scratch
};

}  // namespace

NEREID_REGISTER_KERNEL_COVERING("CompressedAllReduce", kGpu, DT_FLOAT, CompressedAllReduceGpuKernel, CoversCodecs);

}  // namespace nereid
