// CompressedAllReduce on the GPU (place(device=cuda, comm=device)) for
// every codec (ops/cuda/gpu_codecs.h): TernGrad, 1-bit SGD, QSGD (both
// codings) and top-k, all-gathered; PowerSGD and GradiVeQ, summed. When the
// worker's collective queue issues the node, in its (step, bucket) turn as
// on the host, each round puts every gradient's part into one fused device
// buffer on the node's stream (the world's communication stream), NCCL
// sums or all-gathers it, and every gradient absorbs the result, as the CPU
// kernel's AverageFused does: the same bits, but for NCCL's own order of
// summing a summed codec's parts across more than two ranks. No host thread
// waits for the data, except where sizes depend on it: codes of variable
// length (QSGD's Elias coding), whose lengths, all-gathered in the first
// round, are read back to size the second; and codecs sized by their state
// (GradiVeQ, exact while its basis is zero), whose state words are read
// back before the first round of the steps that need them (GradiVeQ's: the
// first after its warm-up, and on while the basis is zero).

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
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
      codecs_.push_back(std::move(codec));
    }
    // One method, so one kind of combining and one count of rounds.
    summed_ = codecs_.front()->summed();
    for (int round = 0; round < codecs_.front()->rounds(); ++round) {
      Round r;
      for (const auto& codec : codecs_) {
        r.offsets.push_back(r.floats);
        r.floats_of.push_back(codec->round_floats(round));
        r.floats += r.floats_of.back();
      }
      most_floats_ = std::max(most_floats_, r.floats);
      rounds_.push_back(std::move(r));
    }
    return absl::OkStatus();
  }

 private:
  // One gradient's device memory in a step.
  struct Gradient {
    const float* g;
    float* average;
    std::vector<float*> state;
    CodecStep step;
  };
  struct Round {
    std::vector<int64_t> offsets;    // of each gradient's part in the fused buffer
    std::vector<int64_t> floats_of;  // each gradient's part
    int64_t floats = 0;              // one rank's
  };

  // Where each gradient's scratch starts, where the state words go, and the
  // bytes of all. A two-round codec keeps its region through the step
  // (PowerSGD's P, the Elias code); a one-round codec's is used within its
  // round only, so one region after the kept ones serves every such
  // gradient in turn; then a word per gradient for codecs sized by state.
  struct ScratchLayout {
    std::vector<size_t> at;
    size_t words_at = 0;
    size_t bytes = 0;
  };
  ScratchLayout LayOutScratch(int world) const {
    ScratchLayout layout;
    layout.at.assign(codecs_.size(), 0);
    size_t kept = 0, shared = 0;
    for (size_t g = 0; g < codecs_.size(); ++g) {
      const size_t bytes = Aligned(codecs_[g]->scratch_bytes(world));
      if (codecs_[g]->rounds() == 1) {
        shared = std::max(shared, bytes);
      } else {
        layout.at[g] = kept;
        kept += bytes;
      }
    }
    for (size_t g = 0; g < codecs_.size(); ++g) {
      if (codecs_[g]->rounds() == 1) layout.at[g] = kept;
    }
    layout.words_at = kept + shared;
    layout.bytes = layout.words_at + (sized_by_state() ? Aligned(sizeof(uint32_t) * codecs_.size()) : 0);
    return layout;
  }
  static size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // Round `round` of a step whose sizes depend on the codecs' state words.
  Round SizedByState(int round, const std::vector<Gradient>& work, const std::vector<uint32_t>& words) const {
    Round r;
    for (size_t g = 0; g < codecs_.size(); ++g) {
      const int64_t floats = codecs_[g]->StepRoundFloats(round, work[g].step, words[g]);
      r.offsets.push_back(r.floats);
      r.floats_of.push_back(floats);
      r.floats += floats;
    }
    return r;
  }

  // Round `round` of a node whose codes vary in length, sized from the
  // length words every rank sent in the round before (`words`, a rank's
  // `previous.floats` apart): each such gradient's part is the longest
  // code, at most its bound, as the host's GatherCodec.
  Round SizedByLengths(int round, const Round& previous, const std::vector<float>& words, int world) const {
    Round r;
    for (size_t g = 0; g < codecs_.size(); ++g) {
      int64_t floats = codecs_[g]->round_floats(round);
      if (codecs_[g]->variable_length()) {
        int64_t longest = 0;
        for (int k = 0; k < world; ++k) {
          uint32_t length;
          std::memcpy(&length, &words[k * previous.floats + previous.offsets[g]], sizeof(length));
          longest = std::max<int64_t>(longest, length);
        }
        floats = std::min(longest, floats);  // a bad length word must not grow the round
      }
      r.offsets.push_back(r.floats);
      r.floats_of.push_back(floats);
      r.floats += floats;
    }
    return r;
  }

  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    // Outputs: the averages, then each gradient's next state (a copy of its
    // input, updated in place by the rounds).
    const int gradients = static_cast<int>(codecs_.size());
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
    ScratchLayout layout = LayOutScratch(world);
    auto scratch = std::make_shared<Tensor>();
    if (layout.bytes > 0) {
      ASSIGN_OR_RETURN(*scratch, cuda::Scratch(ctx, layout.bytes));
    }
    // Each round: every gradient's part into the fused buffer, then
    // (`combine`, a world of more than one) summed or all-gathered, then
    // absorbed by every gradient.
    using Combine = std::function<absl::Status(float* mine, int64_t floats, float* all)>;
    auto run = [this, work, buffer, scratch, layout = std::move(layout), waiter = cuda::StreamWaiter(ctx), stream,
                world](
                   int rank, const Combine& combine) -> absl::Status {
      // The queue's thread launches here: the stream's GPU must be current.
      int device = 0;
      RETURN_IF_ERROR(cuda::CudaStatus(cudaStreamGetDevice(stream, &device), name_ + "cudaStreamGetDevice"));
      RETURN_IF_ERROR(cuda::CudaStatus(cudaSetDevice(device), name_ + "cudaSetDevice"));
      float* mine = buffer->data<float>();
      char* own = static_cast<char*>(scratch->raw());
      // The codecs' state words, where their sizes depend on them.
      std::vector<uint32_t> words(codecs_.size(), 0);
      if (sized_by_state()) RETURN_IF_ERROR(ReadStateWords(*work, own + layout.words_at, waiter, stream, words));
      Round r;
      for (int round = 0; round < static_cast<int>(rounds_.size()); ++round) {
        std::vector<float> lengths;
        if (round > 0 && variable_length()) {
          // The round's size is the longest code: its length words are read
          // back, a wait on the GPU inside the node's step.
          lengths.resize(static_cast<size_t>(r.floats) * (summed_ ? 1 : world));
          const float* all = summed_ || world == 1 ? mine : mine + r.floats;
          RETURN_IF_ERROR(cuda::CudaStatus(cudaMemcpyAsync(lengths.data(), all, lengths.size() * sizeof(float),
                                                           cudaMemcpyDeviceToHost, stream),
                                           name_ + "reading the codes' lengths"));
          RETURN_IF_ERROR(waiter.Wait(stream, name_ + "reading the codes' lengths"));
          r = SizedByLengths(round, r, lengths, world);
        } else if (sized_by_state()) {
          r = SizedByState(round, *work, words);
        } else {
          r = rounds_[round];
        }
        auto size_of = [&](size_t g) { return cuda::GpuRoundSize{r.floats_of[g], words[g]}; };
        for (size_t g = 0; g < codecs_.size(); ++g) {
          const Gradient& w = (*work)[g];
          RETURN_IF_ERROR(cuda::CudaStatus(
              static_cast<cudaError_t>(codecs_[g]->Contribute(round, w.step, rank, w.g, w.state, own + layout.at[g],
                                                              size_of(g), mine + r.offsets[g], stream)),
              absl::StrCat(name_, "round ", round, " of gradient ", g)));
        }
        float* all = mine;
        if (world > 1) {
          if (!summed_) all = mine + r.floats;
          RETURN_IF_ERROR(combine(mine, r.floats, all));
        }
        for (size_t g = 0; g < codecs_.size(); ++g) {
          const Gradient& w = (*work)[g];
          RETURN_IF_ERROR(cuda::CudaStatus(
              static_cast<cudaError_t>(codecs_[g]->Absorb(round, w.step, all + r.offsets[g], r.floats, size_of(g),
                                                          world, w.state, own + layout.at[g], w.average, stream)),
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

  // Each state word the step needs (GpuCodec::NeedsStateWord) written and
  // read back, a wait on the GPU; the others as last read. `words`: one per
  // gradient; `on_device`, as many.
  absl::Status ReadStateWords(const std::vector<Gradient>& work, char* on_device_bytes,
                              const cuda::StreamWaiter& waiter, cudaStream_t stream, std::vector<uint32_t>& words) {
    std::lock_guard<std::mutex> lock(known_words_mu_);
    known_words_.resize(codecs_.size());
    std::vector<size_t> reading;
    for (size_t g = 0; g < codecs_.size(); ++g) {
      if (!codecs_[g]->sized_by_state()) continue;
      if (codecs_[g]->NeedsStateWord(work[g].step, known_words_[g])) {
        reading.push_back(g);
      } else {
        words[g] = known_words_[g].word;
      }
    }
    if (reading.empty()) return absl::OkStatus();
    uint32_t* on_device = reinterpret_cast<uint32_t*>(on_device_bytes);
    RETURN_IF_ERROR(cuda::CudaStatus(cudaMemsetAsync(on_device, 0, sizeof(uint32_t) * words.size(), stream),
                                     name_ + "clearing the state words"));
    for (size_t g : reading) {
      RETURN_IF_ERROR(cuda::CudaStatus(
          static_cast<cudaError_t>(codecs_[g]->WriteStateWord(work[g].step, work[g].state, on_device + g, stream)),
          absl::StrCat(name_, "the state word of gradient ", g)));
    }
    std::vector<uint32_t> read(words.size(), 0);
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaMemcpyAsync(read.data(), on_device, sizeof(uint32_t) * read.size(), cudaMemcpyDeviceToHost, stream),
        name_ + "reading the state words"));
    RETURN_IF_ERROR(waiter.Wait(stream, name_ + "reading the codecs' state words"));
    for (size_t g : reading) {
      words[g] = read[g];
      known_words_[g].Read(work[g].step.step, read[g]);
    }
    return absl::OkStatus();
  }

  bool variable_length() const {
    return std::any_of(codecs_.begin(), codecs_.end(), [](const auto& c) { return c->variable_length(); });
  }
  bool sized_by_state() const {
    return std::any_of(codecs_.begin(), codecs_.end(), [](const auto& c) { return c->sized_by_state(); });
  }

  CompressedGradients node_;
  std::string name_;
  std::vector<std::unique_ptr<cuda::GpuCodec>> codecs_;  // one per gradient
  std::vector<Round> rounds_;  // sized by round_floats (a bound where the length or the state decides)
  bool summed_ = false;
  int64_t most_floats_ = 0;  // one rank's fused parts in its largest round
  // The state words last read back, one per gradient (ReadStateWords).
  std::mutex known_words_mu_;
  std::vector<codes::StickyWord> known_words_;
};

}  // namespace

NEREID_REGISTER_KERNEL_COVERING("CompressedAllReduce", kGpu, DT_FLOAT, CompressedAllReduceGpuKernel, CoversCodecs);

}  // namespace nereid
