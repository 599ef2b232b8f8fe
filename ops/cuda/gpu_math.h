#ifndef NEREID_OPS_CUDA_GPU_MATH_H_
#define NEREID_OPS_CUDA_GPU_MATH_H_

// The project's own CUDA kernels behind the GPU op kernels (gpu_math.cu,
// compiled by nvcc). Plain C++ at this boundary (no absl, no CUDA types):
// each launcher enqueues its kernel on `stream` (a cudaStream_t) and returns
// the launch's cudaError_t as an int (0: success). Pointers are device
// pointers; counts are positive (callers skip empty work).

#include <cstdint>

namespace nereid::cuda::math {

// y[i] = value.
int Fill(float* y, float value, int64_t n, void* stream);
// y[i] = x[i] * scale.
int Scale(const float* x, float scale, float* y, int64_t n, void* stream);
// x viewed as [outer, channels, inner]: y = x + bias[channel].
int BiasAdd(const float* x, const float* bias, float* y, int64_t outer, int64_t channels, int64_t inner,
            void* stream);
// db[c] = the sum of dy over every position of channel c.
int BiasAddGrad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner, void* stream);

// Softmax cross-entropy over rows of `classes` logits and integer labels
// (int64 when labels_are_int64, else int32); a row whose label is
// ignore_index is out of the loss. A label outside [0, classes) makes the
// result NaN (the host kernel's error cannot be raised from the device; the
// trainer stops on a NaN loss and names it).
// loss[0] = the mean over labelled rows (0 when none).
int SoftmaxCrossEntropy(const float* logits, const void* labels, bool labels_are_int64, int64_t rows,
                        int64_t classes, int64_t ignore_index, float* loss, void* stream);
// dlogits = dloss[0] * d(mean loss)/d logits; `labelled` is scratch for one
// float (the labelled rows' count).
int SoftmaxCrossEntropyGrad(const float* logits, const void* labels, bool labels_are_int64, int64_t rows,
                            int64_t classes, int64_t ignore_index, const float* dloss, float* labelled,
                            float* dlogits, void* stream);

// torch.optim.SGD's update with the rate read from device memory (lr[0]):
// without velocity (v, nv null) np = p - lr * (g + wd * p); with it,
// d = g + wd * p, nv = m * v + d, np = p - lr * (nesterov ? d + m * nv : nv).
int Sgd(const float* p, const float* g, const float* lr, const float* v, float* np, float* nv, int64_t n,
        float momentum, float weight_decay, bool nesterov, void* stream);

// MaxPoolGrad as the CPU computes it, over `planes` [in_h, in_w] planes of x
// and [out_h, out_w] of dy: each window (clipped to x: padding holds no
// element) sends its dy to its first largest element in row-major order;
// an element's dx sums what its windows send, in window order.
int MaxPoolGrad(const float* x, const float* dy, float* dx, int64_t planes, int64_t in_h, int64_t in_w,
                int64_t out_h, int64_t out_w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pad_top,
                int64_t pad_left, void* stream);

// Dropout's mask as the CPU kernel draws it: element i is kept when the top
// 24 bits of Mix(stream_seed + i) are >= threshold; kept ones are scaled.
int Dropout(const float* x, float* y, int64_t n, uint64_t stream_seed, uint64_t threshold, float scale,
            void* stream);

}  // namespace nereid::cuda::math

#endif  // NEREID_OPS_CUDA_GPU_MATH_H_
