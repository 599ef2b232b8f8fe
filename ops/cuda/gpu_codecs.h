#ifndef NEREID_OPS_CUDA_GPU_CODECS_H_
#define NEREID_OPS_CUDA_GPU_CODECS_H_

// The codecs the GPU runs (ops/cuda/codec_gpu.h), one per gradient, made
// from the host codec the node's kernel made for it, so their sizes, state,
// rounds and options are the host's: the bucketed codes (TernGrad, 1-bit
// SGD, QSGD's fixed coding) and top-k, all-gathered in one round; QSGD's
// Elias coding, all-gathered in two (its length, then its code); PowerSGD,
// summed in two; GradiVeQ, summed in one. Adding one: its launchers in codec_gpu.cu, a
// class in gpu_codecs.cc and a line in its table.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compress/codec.h"
#include "compress/sticky_word.h"

namespace nereid::cuda {

// What the host knows of one round of a step when it runs it: the floats
// of a rank's part (the round's; the longest code's, where the length
// varies; the step's, where the state decides), and the word a codec sized
// by its state wrote for the step (0 for the others).
struct GpuRoundSize {
  int64_t floats = 0;
  uint32_t state_word = 0;
};

class GpuCodec {
 public:
  virtual ~GpuCodec() = default;
  // How a round's codes are combined: summed by allreduce, or all-gathered.
  virtual bool summed() const { return false; }
  virtual int rounds() const { return 1; }
  // A code of variable length (GatherCodec's protocol): round 0 sends one
  // float, the bits of the code's length; round 1 sends the longest length
  // any rank sent (at most round_floats(1)), which the kernel reads back to
  // the host to size the round.
  virtual bool variable_length() const { return false; }
  // A codec whose step's sizes depend on its device state (GradiVeQ: a
  // step goes exact while its basis is all zero) writes one word of it with
  // WriteStateWord before the step's first round; the kernel reads the
  // words its steps need back to the host (one wait on the GPU) and passes
  // them on.
  virtual bool sized_by_state() const { return false; }
  virtual int WriteStateWord(const CodecStep& step, const std::vector<float*>& state, uint32_t* word,
                             cudaStream_t stream) const {
    return 0;
  }
  // Whether `step` needs its word read back, given the last one read; where
  // not, the kernel passes `last.word` on and the step waits for nothing.
  virtual bool NeedsStateWord(const CodecStep& step, const codes::StickyWord& last) const { return sized_by_state(); }
  // One rank's floats in round `round`: the most any step sends (the host
  // codec's RoundFloats; a bound where the length varies or the state
  // decides), and this step's given its state word.
  virtual int64_t round_floats(int round) const = 0;
  virtual int64_t StepRoundFloats(int round, const CodecStep& step, uint32_t state_word) const {
    return round_floats(round);
  }
  // What the host codec's PayloadFloats says.
  virtual int64_t payload_floats() const;
  // The device scratch the gradient keeps through a step's rounds in a world
  // of `world` ranks.
  virtual size_t scratch_bytes(int world) const = 0;
  // This rank's part of round `round` into `out` (size.floats floats);
  // `state` (the host codec's State(), in order) is read and updated in
  // place. Enqueued on `stream`; a cudaError_t as an int.
  virtual int Contribute(int round, const CodecStep& step, int rank, const float* g, const std::vector<float*>& state,
                         void* scratch, const GpuRoundSize& size, float* out, cudaStream_t stream) const = 0;
  // Round `round`'s combined parts, size.floats floats from each rank:
  // summed, at `in`; gathered, rank r's at in + r * stride. After the last
  // round `average` holds the average.
  virtual int Absorb(int round, const CodecStep& step, const float* in, int64_t stride, const GpuRoundSize& size,
                     int world, const std::vector<float*>& state, void* scratch, float* average,
                     cudaStream_t stream) const = 0;
};

// The GPU codec of `method` for a gradient of `elements` values whose host
// codec is `host` (made and initialised); Unimplemented, naming what the GPU
// runs, where there is none.
absl::StatusOr<std::unique_ptr<GpuCodec>> MakeGpuCodec(const std::string& method, const GradientCodec& host,
                                                       int64_t elements);

}  // namespace nereid::cuda

#endif  // NEREID_OPS_CUDA_GPU_CODECS_H_
