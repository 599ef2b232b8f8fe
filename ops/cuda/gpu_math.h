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
// (Weston-Watkins), sum over k != y of max(0, margin - s[y] + s[k]); the
// one-vs-rest logistic loss, sum over k of log(1 + exp(-y_k s[k])) with
// y_k = +1 at the label and -1 elsewhere. A row whose label is ignore_index
// is out of the loss. A label outside [0, classes) makes the result NaN (the
// host kernel's error cannot be raised from the device; the trainer stops on
// a NaN loss and names it).
enum class RowLoss { kSoftmaxCrossEntropy, kHinge, kLogistic };
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
// y = a + b, a - b, a * b or a / b (a's dims in[0], b's in[1]); n: y's
// elements.
enum class BinaryOp { kAdd, kSub, kMul, kDiv };
int BroadcastBinary(BinaryOp op, const float* a, const float* b, float* y, int64_t n, const Broadcast& shape,
                    void* stream);
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

// GELU, exact (0.5 x (1 + erf(x / sqrt 2))) or its tanh form (0.5 x (1 +
// tanh(sqrt(2/pi) (x + 0.044715 x^3)))), and dx = dy * GELU'(x); computed in
// double and rounded once (the host's oneDNN uses its own polynomials: the
// two agree within float rounding, not bit for bit).
int Gelu(const float* x, float* y, int64_t n, bool tanh_form, void* stream);
int GeluGrad(const float* dy, const float* x, float* dx, int64_t n, bool tanh_form, void* stream);

// Softmax along the middle dim of [outer, axis, inner] (a thread per line of
// `axis` elements, `inner` apart): y = exp(x - max) / sum, the exponentials
// and their sum in double. SoftmaxGrad: dx = y * (dy - sum(dy * y)), the sum
// in double.
struct Lines {
  int64_t outer, axis, inner;
};
int Softmax(const float* x, float* y, const Lines& lines, void* stream);
int SoftmaxGrad(const float* dy, const float* y, float* dx, const Lines& lines, void* stream);

// LayerNorm over x viewed as [rows, width] in ops/cpu/layer_norm_kernels.cc's
// float arithmetic and order (its SumLanes: 8 lanes, then the tail, combined
// as a fixed tree; dscale and dbias add rows in order, a thread per column):
// the host's floats bit for bit. mean and rstd get a value per row.
int LayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean, float* rstd, int64_t rows,
              int64_t width, float epsilon, void* stream);
// dx, dscale and dbias (rows > 0 or width > 0); `row_means` is scratch of
// 2 * rows floats.
int LayerNormGrad(const float* dy, const float* x, const float* scale, const float* mean, const float* rstd, float* dx,
                  float* dscale, float* dbias, int64_t rows, int64_t width, float* row_means, void* stream);

// y (dims out) = x read through `stride` (x's strides in y's dim order):
// Transpose, for elements of 4 or 8 bytes (element_bytes).
struct Strided {
  int rank = 0;
  int64_t out[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};
int Transpose(const void* x, void* y, int element_bytes, int64_t n, const Strided& view, void* stream);

// CausalMask over `rows` rows of `keys` scores (rows of [outer, queries,
// keys]): row r keeps its first (r % queries) + keys - queries + 1 scores and
// the rest become `value`.
int CausalMask(const float* x, float* y, int64_t rows, int64_t queries, int64_t keys, float value, void* stream);

// Ids (int64 or int32) into a table viewed as [outer, rows, inner], rows
// the gathered axis; a negative id counts from the end.
struct Ids {
  const void* data;
  bool is64;
  int64_t count;
};
struct Table {
  int64_t outer, rows, inner;
};
// bad[0] = the first position whose id is outside [-rows, rows) (-1: none),
// bad[1] = that id (a device array of two).
int FindBadId(const Ids& ids, int64_t rows, int64_t* bad, void* stream);
// y [outer, ids, inner] = the rows the ids pick (0 for an id outside).
int Gather(const float* params, const Ids& ids, const Table& table, float* y, void* stream);
// dparams = zero, plus each id's dy row added into its row, ids in order
// (the host's sums bit for bit); ids outside the table add nothing.
// `scratch` holds GatherGradScratch(table, ids) int64s: the positions of
// each row's ids (a thread per row lists them in order), no atomics.
int64_t GatherGradScratch(const Table& table, const Ids& ids);
int GatherGrad(const float* dy, const Ids& ids, const Table& table, float* dparams, int64_t* scratch, void* stream);

}  // namespace nereid::cuda::math

#endif  // NEREID_OPS_CUDA_GPU_MATH_H_
