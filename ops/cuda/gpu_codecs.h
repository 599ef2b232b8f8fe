#ifndef NEREID_OPS_CUDA_GPU_CODECS_H_
#define NEREID_OPS_CUDA_GPU_CODECS_H_

// The gather codecs the GPU runs (ops/cuda/codec_gpu.h), one per gradient,
// made from the host codec the node's kernel made for it, so their sizes,
// state and options are the host's: the bucketed codes (TernGrad, 1-bit SGD,
// QSGD's fixed coding) and top-k. Adding one: its launchers in
// codec_gpu.cu, a class here and a line in gpu_codecs.cc's table.

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
  // One rank's code, in floats (the host codec's PayloadFloats()).
  virtual int64_t floats() const = 0;
  // The device scratch an Encode needs.
  virtual size_t scratch_bytes() const = 0;
  // code <- encode(g); `state` (the host codec's State(), in order) is
  // updated in place. Enqueued on `stream`; a cudaError_t as an int.
  virtual int Encode(const float* g, const std::vector<float*>& state, uint64_t seed, void* scratch,
                     float* code, cudaStream_t stream) const = 0;
  // average <- the average of every rank's decoded code, in rank order
  // (rank r's code at codes + r * stride).
  virtual int DecodeAverage(const float* codes, int64_t stride, int world, float* average,
                            cudaStream_t stream) const = 0;
};

// The GPU codec of `method` for a gradient of `elements` values whose host
// codec is `host` (made and initialised); Unimplemented, naming what the GPU
// runs, where there is none.
absl::StatusOr<std::unique_ptr<GpuCodec>> MakeGpuCodec(const std::string& method, const GradientCodec& host,
                                                       int64_t elements);

}  // namespace nereid::cuda

#endif  // NEREID_OPS_CUDA_GPU_CODECS_H_
