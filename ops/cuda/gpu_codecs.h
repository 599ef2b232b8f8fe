#ifndef NEREID_OPS_CUDA_GPU_CODECS_H_
#define NEREID_OPS_CUDA_GPU_CODECS_H_

// The codecs the GPU runs (ops/cuda/codec_gpu.h), one per gradient, made
// from the host codec the node's kernel made for it, so their sizes, state,
// rounds and options are the host's: the bucketed codes (TernGrad, 1-bit
// SGD, QSGD's fixed coding) and top-k, all-gathered in one round; QSGD's
// Elias coding, all-gathered in two (its length, then its code); PowerSGD,
// summed in two. Adding one: its launchers in codec_gpu.cu, a
// class in gpu_codecs.cc and a line in its table.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compress/codec.h"

namespace nereid::cuda {

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
  // One rank's floats in round `round` (the host codec's RoundFloats; a
  // bound where the length varies).
  virtual int64_t round_floats(int round) const = 0;
  // The device scratch the gradient keeps through a step's rounds in a world
  // of `world` ranks.
  virtual size_t scratch_bytes(int world) const = 0;
  // This rank's part of round `round` into `out` (`floats` floats: the
  // round's, or the longest code's); `state` (the host codec's State(), in
  // order) is read and updated in place. Enqueued on `stream`; a
  // cudaError_t as an int.
  virtual int Contribute(int round, const CodecStep& step, int rank, const float* g, const std::vector<float*>& state,
                         void* scratch, int64_t floats, float* out, cudaStream_t stream) const = 0;
  // Round `round`'s combined parts, `floats` floats from each rank: summed,
  // at `in`; gathered, rank r's at in + r * stride. After the last round
  // `average` holds the average.
  virtual int Absorb(int round, const float* in, int64_t stride, int64_t floats, int world,
                     const std::vector<float*>& state, void* scratch, float* average, cudaStream_t stream) const = 0;
};

// The GPU codec of `method` for a gradient of `elements` values whose host
// codec is `host` (made and initialised); Unimplemented, naming what the GPU
// runs, where there is none.
absl::StatusOr<std::unique_ptr<GpuCodec>> MakeGpuCodec(const std::string& method, const GradientCodec& host,
                                                       int64_t elements);

}  // namespace nereid::cuda

#endif  // NEREID_OPS_CUDA_GPU_CODECS_H_
