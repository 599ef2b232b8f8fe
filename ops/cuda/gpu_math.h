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

// The class losses over rows of `classes` scores and integer labels (int64
// when labels_are_int64, else int32), as ops/cpu/loss_kernels.cc computes
// them: softmax cross-entropy, -log softmax(s)[y]; the multi-class hinge
// (Weston-Watkins), sum over k != y of max(0, margin - s[y] + s[k]). A row
// whose label is ignore_index is out of the loss. A label outside
// [0, classes) makes the result NaN (the host kernel's error cannot be
// raised from the device; the trainer stops on a NaN loss and names it).
enum class RowLoss { kSoftmaxCrossEntropy, kHinge };
// loss[0] = the mean over labelled rows (0 when none), summed in double.
int MeanRowLoss(RowLoss kind, float margin, const float* logits, const void* labels, bool labels_are_int64,
                int64_t rows, int64_t classes, int64_t ignore_index, float* loss, void* stream);
// dlogits = dloss[0] * d(mean loss)/d logits; `labelled` is scratch for one
// float (the labelled rows' count).
int MeanRowLossGrad(RowLoss kind, float margin, const float* logits, const void* labels, bool labels_are_int64,
                    int64_t rows, int64_t classes, int64_t ignore_index, const float* dloss, float* labelled,
                    float* dlogits, void* stream);

// torch.optim.SGD's update with the rate read from device memory (lr[0]):
// without velocity (v, nv null) np = p - lr * (g + wd * p); with it,
// d = g + wd * p, nv = m * v + d, np = p - lr * (nesterov ? d + m * nv : nv).
int Sgd(const float* p, const float* g, const float* lr, const float* v, float* np, float* nv, int64_t n,
        float momentum, float weight_decay, bool nesterov, void* stream);

// torch.optim.Adam's update (AdamW's when decoupled) with the rate read from
// device memory (lr[0]) and the bias corrections 1 - beta^t computed by the
// caller, in ops/cpu/optimizer_kernels.cc's float arithmetic.
struct AdamHyper {
  float beta1, beta2, epsilon, weight_decay;
  bool decoupled;
  float correction1, correction2;
};
int Adam(const float* p, const float* g, const float* lr, const float* m, const float* v, float* np, float* nm,
         float* nv, int64_t n, const AdamHyper& hyper, void* stream);

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

// Broadcasting over at most kMaxRank dims: the broadcast shape `out` and up
// to two operands' dims aligned with it at the right (leading 1s added),
// each dim either out's or 1 (broadcast).
inline constexpr int kMaxRank = 8;
struct Broadcast {
  int rank = 0;
  int64_t out[kMaxRank] = {};
  int64_t in[2][kMaxRank] = {};
};
// y = a + b (a's dims in[0], b's in[1]); n: y's elements.
int BroadcastAdd(const float* a, const float* b, float* y, int64_t n, const Broadcast& shape, void* stream);
// dx = dy (dims out) summed down to dims in[0]; n: dx's elements. Each
// element adds its dy elements one by one in increasing index, in float,
// the CPU's order: the sums are the CPU's bit for bit (a thread per dx
// element, so a reduction to few elements runs on few threads).
int ReduceToShape(const float* dy, float* dx, int64_t n, const Broadcast& shape, void* stream);
// y = inputs[0] + inputs[1] + ... in input order (count >= 2), as the CPU's
// AddN; `inputs` is a host array of device pointers to n floats each.
int AddN(const float* const* inputs, int count, float* y, int64_t n, void* stream);

// GlobalAvgPool: y[p] = the sum of plane p's `area` elements, in order, in
// float, times scale (the CPU's loop: a thread per plane).
int GlobalAvgPool(const float* x, float* y, int64_t planes, int64_t area, float scale, void* stream);
// dx[p * area + i] = dy[p] * scale.
int GlobalAvgPoolGrad(const float* dy, float* dx, int64_t planes, int64_t area, float scale, void* stream);

// BatchNorm over x viewed as [outer, channels, inner] (PyTorch's
// semantics, ops/cpu/batch_norm_kernels.cc): y = sm * (x - mean) + offset
// with sm = scale / sqrt(var + epsilon). Per-channel sums run in double over
// chunks of a channel fixed by its size, added as trees: the same order
// every run, no atomics. `partials` is scratch of
// BatchNormScratchDoubles(channels, outer * inner) doubles.
int64_t BatchNormScratchDoubles(int64_t channels, int64_t per_channel);
// Training: mean and var become the batch's (var biased), next_mean and
// next_var the running update (1 - momentum) * running + momentum * batch,
// the variance's unbiased by `unbias` (M / (M - 1) as a float).
int BatchNormTraining(const float* x, const float* scale, const float* offset, const float* running_mean,
                      const float* running_var, float* y, float* mean, float* var, float* next_mean, float* next_var,
                      int64_t outer, int64_t channels, int64_t inner, float epsilon, float momentum, float unbias,
                      double* partials, void* stream);
// Inference: y normalised by the given (running) mean and var.
int BatchNormInference(const float* x, const float* scale, const float* offset, const float* mean, const float* var,
                       float* y, int64_t outer, int64_t channels, int64_t inner, float epsilon, void* stream);
// The gradients of training-mode BatchNorm given its saved mean and var:
// doffset = sum dy, dscale = sum dy * (x - mean) / sqrt(var + epsilon),
// dx = (dy - doffset / M - (x - mean) * dscale / sqrt(var + epsilon) / M)
//      * scale / sqrt(var + epsilon), with M = outer * inner.
int BatchNormGrad(const float* dy, const float* x, const float* scale, const float* mean, const float* var, float* dx,
                  float* dscale, float* doffset, int64_t outer, int64_t channels, int64_t inner, float epsilon,
                  double* partials, void* stream);

}  // namespace nereid::cuda::math

#endif  // NEREID_OPS_CUDA_GPU_MATH_H_
