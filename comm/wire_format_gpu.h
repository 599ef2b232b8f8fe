#ifndef NEREID_COMM_WIRE_FORMAT_GPU_H_
#define NEREID_COMM_WIRE_FORMAT_GPU_H_

// The 16-bit wire formats (comm/wire_format.h) on a CUDA stream, for NCCL's
// collectives of float32 buffers that travel as float16 or bfloat16. The
// conversions round as the host's do (to nearest, ties to even; bf16 by the
// same bit arithmetic, fp16 by CUDA's __float2half_rn, IEEE's rounding, as
// the host's F16C), so a value takes the same 16 bits on either side; NaN
// stays NaN (its payload may differ).
//
// Plain C++ at this boundary (wire_format_gpu.cu is compiled by nvcc): each
// launcher enqueues one kernel on `stream` (a cudaStream_t) and returns the
// launch's cudaError_t as an int (0: success). Pointers are device pointers;
// n > 0.

#include <cstdint>

namespace nereid::wire_gpu {

// out[i] = the 16-bit code of in[i].
int Encode(bool bfloat16, const float* in, uint16_t* out, int64_t n, void* stream);
// out[i] = decode(in[i]) * scale (scale 1 leaves the value exact).
int Decode(bool bfloat16, const uint16_t* in, float* out, float scale, int64_t n, void* stream);
// y[i] += x[i] - decode(encode(x[i])): what rounding takes off x, kept by
// its sender (gossip's pushes conserve their mass so).
int AddRoundingResidual(bool bfloat16, const float* x, float* y, int64_t n, void* stream);

}  // namespace nereid::wire_gpu

#endif  // NEREID_COMM_WIRE_FORMAT_GPU_H_
