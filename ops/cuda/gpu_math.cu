// The project's own CUDA kernels (see gpu_math.h). Each mirrors its CPU
// kernel's arithmetic. Where the CPU sums in double (losses), so does the
// device; batch norm's per-channel sums (float on the CPU, in oneDNN's
// order) run in double too, and so does softmax's and GELU's arithmetic
// (oneDNN's on the CPU); layer norm's and GatherGrad's float sums follow
// the CPU's own loops, term for term. Every reduction adds in an order
// fixed by the shape (strided shares added as a tree, or one thread summing
// in the CPU's order), never by atomics: the same result every run. Built
// with -fmad=false: the CPU kernels do not fuse multiply-adds, so neither
// do these.

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/gpu_math.h"

namespace nereid::cuda::math {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

int Blocks(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

#define NEREID_GRID_LOOP(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);         \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Combines the block's per-thread values (K of them each) as a tree in
// shared memory, a fixed order; every thread gets the results. blockDim.x
// must be kThreads.
template <typename T, int K, typename Combine>
__device__ void BlockReduce(T (&value)[K], Combine combine) {
  __shared__ T shared[K][kThreads];
  for (int k = 0; k < K; ++k) shared[k][threadIdx.x] = value[k];
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      for (int k = 0; k < K; ++k) {
        shared[k][threadIdx.x] = combine(shared[k][threadIdx.x], shared[k][threadIdx.x + width]);
      }
    }
    __syncthreads();
  }
  for (int k = 0; k < K; ++k) value[k] = shared[k][0];
}

struct Plus {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Times {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a * b; }
};
struct Minus {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a - b; }
};
// IEEE division, as the host's (nvcc's default -prec-div=true).
struct Divides {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a / b; }
};
struct Min {
  template <typename T>
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};

template <typename T, int K>
__device__ void BlockSum(T (&sum)[K]) {
  BlockReduce(sum, Plus());
}

__global__ void FillKernel(float* y, float value, int64_t n) {
  NEREID_GRID_LOOP(i, n) { y[i] = value; }
}

__global__ void ScaleKernel(const float* x, float scale, float* y, int64_t n) {
  NEREID_GRID_LOOP(i, n) { y[i] = x[i] * scale; }
}

__global__ void BiasAddKernel(const float* x, const float* bias, float* y, int64_t n, int64_t channels,
                              int64_t inner) {
  NEREID_GRID_LOOP(i, n) { y[i] = x[i] + bias[(i / inner) % channels]; }
}

// One block per channel; each thread sums a strided share, then the block
// adds the shares as a tree.
__global__ void BiasAddGradKernel(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner) {
  const int64_t c = blockIdx.x;
  const int64_t per_channel = outer * inner;
  float sum[1] = {0};
  for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const int64_t n = j / inner, i = j % inner;
    sum[0] += dy[(n * channels + c) * inner + i];
  }
  BlockSum(sum);
  if (threadIdx.x == 0) db[c] = sum[0];
}

__device__ int64_t LabelAt(const void* labels, bool is64, int64_t row) {
  return is64 ? static_cast<const int64_t*>(labels)[row] : static_cast<int64_t>(static_cast<const int32_t*>(labels)[row]);
}

// A row's loss and gradient, as ops/cpu/loss_kernels.cc computes them; the
// label y is in [0, k).
struct SoftmaxCrossEntropyRow {
  // The row's maximum and the sum of exp(s - max) in double.
  __device__ static double SumExp(const float* s, int64_t k, float* max) {
    *max = s[0];
    for (int64_t j = 1; j < k; ++j) *max = s[j] > *max ? s[j] : *max;
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += exp(static_cast<double>(s[j] - *max));
    return sum;
  }
  // -log softmax(s)[y].
  __device__ static double Loss(const float* s, int64_t k, int64_t y, float) {
    float max;
    const double sum = SumExp(s, k, &max);
    return log(sum) + max - s[y];
  }
  // softmax(s) - onehot(y).
  __device__ static void Grad(const float* s, int64_t k, int64_t y, float, float* ds) {
    float max;
    const double sum = SumExp(s, k, &max);
    for (int64_t j = 0; j < k; ++j) ds[j] = static_cast<float>(exp(static_cast<double>(s[j] - max)) / sum);
    ds[y] -= 1;
  }
};

struct HingeRow {
  // The sum in double, as the CPU's: max(0, margin - s[y] + s[j]) over j != y.
  __device__ static double Loss(const float* s, int64_t k, int64_t y, float margin) {
    double loss = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double term = static_cast<double>(margin) - s[y] + s[j];
      if (j != y) loss += term > 0.0 ? term : 0.0;  // std::max(0.0, term): 0 for NaN as well
    }
    return loss;
  }
  // 1 for each violated class, minus their count at the label (float).
  __device__ static void Grad(const float* s, int64_t k, int64_t y, float margin, float* ds) {
    float violated = 0;
    for (int64_t j = 0; j < k; ++j) {
      ds[j] = (j != y && margin - s[y] + s[j] > 0) ? 1.0f : 0.0f;
      violated += ds[j];
    }
    ds[y] = -violated;
  }
};

struct LogisticRow {
  // log(1 + exp(z)) without overflow, as the host's.
  __device__ static double Softplus(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }
  __device__ static double Loss(const float* s, int64_t k, int64_t y, float) {
    double loss = 0;
    for (int64_t j = 0; j < k; ++j) loss += Softplus(j == y ? -s[j] : s[j]);
    return loss;
  }
  // -y_k sigmoid(-y_k s_k), in double.
  __device__ static void Grad(const float* s, int64_t k, int64_t y, float, float* ds) {
    for (int64_t j = 0; j < k; ++j) {
      const double sign = j == y ? 1.0 : -1.0;
      ds[j] = static_cast<float>(-sign / (1.0 + exp(sign * s[j])));
    }
  }
};

// One block: each thread sums a strided share of the rows (loss and
// labelled count) in double; the block adds the shares as a tree. A label
// out of range makes the loss NaN.
template <typename Row>
__global__ void MeanRowLossKernel(const float* logits, const void* labels, bool is64, int64_t rows, int64_t k,
                                  int64_t ignore_index, float margin, float* loss) {
  double sum[2] = {0, 0};
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t y = LabelAt(labels, is64, r);
    if (y == ignore_index) continue;
    sum[0] += y < 0 || y >= k ? nan("") : Row::Loss(logits + r * k, k, y, margin);
    sum[1] += 1;
  }
  BlockSum(sum);
  if (threadIdx.x == 0) loss[0] = sum[1] > 0 ? static_cast<float>(sum[0] / sum[1]) : 0.0f;
}

__global__ void CountLabelledKernel(const void* labels, bool is64, int64_t rows, int64_t ignore_index,
                                    float* labelled) {
  double count[1] = {0};
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) count[0] += LabelAt(labels, is64, r) != ignore_index ? 1 : 0;
  BlockSum(count);
  if (threadIdx.x == 0) labelled[0] = static_cast<float>(count[0]);
}

// One thread per row: the row's gradient times dloss / labelled.
template <typename Row>
__global__ void MeanRowLossGradKernel(const float* logits, const void* labels, bool is64, int64_t rows, int64_t k,
                                      int64_t ignore_index, float margin, const float* dloss, const float* labelled,
                                      float* dlogits) {
  NEREID_GRID_LOOP(r, rows) {
    float* ds = dlogits + r * k;
    const int64_t y = LabelAt(labels, is64, r);
    if (y == ignore_index) {
      for (int64_t j = 0; j < k; ++j) ds[j] = 0.0f;
      continue;
    }
    if (y < 0 || y >= k) {
      for (int64_t j = 0; j < k; ++j) ds[j] = nanf("");
      continue;
    }
    const float scale = labelled[0] > 0 ? dloss[0] / labelled[0] : 0.0f;
    Row::Grad(logits + r * k, k, y, margin, ds);
    for (int64_t j = 0; j < k; ++j) ds[j] *= scale;
  }
}

__global__ void SgdKernel(const float* p, const float* g, const float* lr, float* np, int64_t n, float wd) {
  const float rate = lr[0];
  NEREID_GRID_LOOP(i, n) { np[i] = p[i] - rate * (g[i] + wd * p[i]); }
}

__global__ void MomentumKernel(const float* p, const float* g, const float* lr, const float* v, float* np, float* nv,
                               int64_t n, float m, float wd, bool nesterov) {
  const float rate = lr[0];
  NEREID_GRID_LOOP(i, n) {
    const float d = g[i] + wd * p[i];
    const float vel = m * v[i] + d;
    nv[i] = vel;
    np[i] = p[i] - rate * (nesterov ? d + m * vel : vel);
  }
}

// One thread per element of dx: it visits the windows covering it in the
// CPU's order (rows of windows, then columns), finds each window's first
// largest element, and adds the window's dy where that is itself. No two
// threads write one element, so no atomics, and the sums are the CPU's.
__global__ void MaxPoolGradKernel(const float* x, const float* dy, float* dx, int64_t planes, int64_t in_h,
                                  int64_t in_w, int64_t out_h, int64_t out_w, int64_t kh, int64_t kw, int64_t sh,
                                  int64_t sw, int64_t pad_top, int64_t pad_left) {
  const int64_t n = planes * in_h * in_w;
  NEREID_GRID_LOOP(i, n) {
    const int64_t plane = i / (in_h * in_w), h = (i / in_w) % in_h, c = i % in_w;
    const float* xp = x + plane * in_h * in_w;
    const float* dyp = dy + plane * out_h * out_w;
    // Windows oh with oh * sh - pad_top <= h < oh * sh - pad_top + kh.
    const int64_t oh_first = h + pad_top - kh + 1 <= 0 ? 0 : (h + pad_top - kh + 1 + sh - 1) / sh;
    const int64_t oh_last = (h + pad_top) / sh < out_h - 1 ? (h + pad_top) / sh : out_h - 1;
    const int64_t ow_first = c + pad_left - kw + 1 <= 0 ? 0 : (c + pad_left - kw + 1 + sw - 1) / sw;
    const int64_t ow_last = (c + pad_left) / sw < out_w - 1 ? (c + pad_left) / sw : out_w - 1;
    float sum = 0;
    for (int64_t oh = oh_first; oh <= oh_last; ++oh) {
      const int64_t h0 = oh * sh - pad_top;
      const int64_t h_begin = h0 > 0 ? h0 : 0, h_end = h0 + kh < in_h ? h0 + kh : in_h;
      for (int64_t ow = ow_first; ow <= ow_last; ++ow) {
        const int64_t w0 = ow * sw - pad_left;
        const int64_t w_begin = w0 > 0 ? w0 : 0, w_end = w0 + kw < in_w ? w0 + kw : in_w;
        int64_t best = -1;
        for (int64_t r = h_begin; r < h_end; ++r) {
          for (int64_t q = w_begin; q < w_end; ++q) {
            if (best < 0 || xp[r * in_w + q] > xp[best]) best = r * in_w + q;
          }
        }
        if (best == h * in_w + c) sum += dyp[oh * out_w + ow];
      }
    }
    dx[i] = sum;
  }
}

__global__ void AdamKernel(const float* p, const float* g, const float* lr, const float* m, const float* v, float* np,
                           float* nm, float* nv, int64_t n, AdamHyper h) {
  const float rate = lr[0];
  NEREID_GRID_LOOP(i, n) {
    const float grad = h.decoupled ? g[i] : g[i] + h.weight_decay * p[i];
    const float mi = h.beta1 * m[i] + (1 - h.beta1) * grad;
    const float vi = h.beta2 * v[i] + (1 - h.beta2) * grad * grad;
    nm[i] = mi;
    nv[i] = vi;
    const float base = h.decoupled ? p[i] * (1 - rate * h.weight_decay) : p[i];
    np[i] = base - rate * (mi / h.correction1) / (sqrtf(vi / h.correction2) + h.epsilon);
  }
}

// SplitMix64's finaliser, as ops/cpu/dropout_kernels.cc.
__device__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void DropoutKernel(const float* x, float* y, int64_t n, uint64_t stream_seed, uint64_t threshold,
                              float scale) {
  NEREID_GRID_LOOP(i, n) {
    const bool keep = (Mix(stream_seed + static_cast<uint64_t>(i)) >> 40) >= threshold;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

// y[i] = a[..] op b[..]: i's coordinates in out, each operand's offset
// leaving out its broadcast dims.
template <typename Op>
__global__ void BroadcastBinaryKernel(Op op, const float* a, const float* b, float* y, int64_t n, Broadcast shape) {
  NEREID_GRID_LOOP(i, n) {
    int64_t rest = i, at[2] = {0, 0}, stride[2] = {1, 1};
    for (int d = shape.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % shape.out[d];
      rest /= shape.out[d];
      for (int k = 0; k < 2; ++k) {
        if (shape.in[k][d] != 1) at[k] += coord * stride[k];
        stride[k] *= shape.in[k][d];
      }
    }
    y[i] = op(a[at[0]], b[at[1]]);
  }
}

// One thread per dx element: it walks its dy elements with an odometer over
// the reduced dims (dx's 1 where dy's is not), the last fastest, so in
// increasing index, and adds them in float as the CPU's loop does.
__global__ void ReduceToShapeKernel(const float* dy, float* dx, int64_t n, Broadcast shape) {
  int64_t stride[kMaxRank];
  for (int64_t d = shape.rank - 1, s = 1; d >= 0; --d) {
    stride[d] = s;
    s *= shape.out[d];
  }
  NEREID_GRID_LOOP(o, n) {
    // o's first dy element: its reduced coordinates 0.
    int64_t rest = o, at = 0;
    for (int d = shape.rank - 1; d >= 0; --d) {
      at += rest % shape.in[0][d] * stride[d];
      rest /= shape.in[0][d];
    }
    int64_t coord[kMaxRank] = {};
    float sum = 0;
    for (;;) {
      sum += dy[at];
      int d = shape.rank - 1;
      for (; d >= 0; --d) {
        if (shape.in[0][d] != 1 || shape.out[d] == 1) continue;  // kept, or 1 in both
        if (++coord[d] < shape.out[d]) {
          at += stride[d];
          break;
        }
        at -= (shape.out[d] - 1) * stride[d];
        coord[d] = 0;
      }
      if (d < 0) break;
    }
    dx[o] = sum;
  }
}

// AddN's inputs go by value, a launch's worth at a time.
constexpr int kSummands = 8;
struct Summands {
  const float* in[kSummands];
};

// y = (first ? in[0] : y) + the rest of in, in order.
__global__ void AccumulateKernel(Summands s, int count, bool first, float* y, int64_t n) {
  NEREID_GRID_LOOP(i, n) {
    float sum = first ? s.in[0][i] : y[i];
    for (int k = first ? 1 : 0; k < count; ++k) sum += s.in[k][i];
    y[i] = sum;
  }
}

__global__ void GlobalAvgPoolKernel(const float* x, float* y, int64_t planes, int64_t area, float scale) {
  NEREID_GRID_LOOP(p, planes) {
    float sum = 0;
    for (int64_t i = 0; i < area; ++i) sum += x[p * area + i];
    y[p] = sum * scale;
  }
}

__global__ void GlobalAvgPoolGradKernel(const float* dy, float* dx, int64_t planes, int64_t area, float scale) {
  NEREID_GRID_LOOP(i, planes * area) { dx[i] = dy[i / area] * scale; }
}

// Batch norm's per-channel sums in two launches: blocks of `chunks` per
// channel each sum a fixed stretch of the channel (strided shares, a tree)
// into `partials`; then a block per channel adds its chunks' partials (a
// tree) and hands the K totals to Finish. Chunks depend on the shape only.
constexpr int64_t kChunkElements = 16 * kThreads;
constexpr int64_t kMaxChunks = 1024;

int64_t ChunksOf(int64_t per_channel) {
  const int64_t chunks = (per_channel + kChunkElements - 1) / kChunkElements;
  return chunks < kMaxChunks ? chunks : kMaxChunks;
}

// Term(c, at, sums) adds element `at` (of channel c) into the K sums.
template <int K, typename Term>
__global__ void ChannelPartialsKernel(Term term, int64_t outer, int64_t channels, int64_t inner, int64_t chunks,
                                      double* partials) {
  const int64_t c = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int64_t per_channel = outer * inner, size = (per_channel + chunks - 1) / chunks;
  const int64_t begin = chunk * size, end = begin + size < per_channel ? begin + size : per_channel;
  double sum[K] = {};
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t n = j / inner, i = j % inner;
    term(c, (n * channels + c) * inner + i, sum);
  }
  BlockSum(sum);
  if (threadIdx.x == 0) {
    for (int k = 0; k < K; ++k) partials[(c * chunks + chunk) * K + k] = sum[k];
  }
}

template <int K, typename Finish>
__global__ void ChannelTotalsKernel(const double* partials, int64_t chunks, Finish finish) {
  const int64_t c = blockIdx.x;
  double sum[K] = {};
  for (int64_t b = threadIdx.x; b < chunks; b += blockDim.x) {
    for (int k = 0; k < K; ++k) sum[k] += partials[(c * chunks + b) * K + k];
  }
  BlockSum(sum);
  if (threadIdx.x == 0) finish(c, sum);
}

struct SumOfX {
  const float* x;
  __device__ void operator()(int64_t, int64_t at, double* sum) const { sum[0] += x[at]; }
};
// (x - mean) in float, as the CPU; its square exact in double.
struct SquaredDeviation {
  const float* x;
  const float* mean;
  __device__ void operator()(int64_t c, int64_t at, double* sum) const {
    const float d = x[at] - mean[c];
    sum[0] += static_cast<double>(d) * d;
  }
};
// sum dy * (x - mean) and sum dy.
struct GradSums {
  const float* dy;
  const float* x;
  const float* mean;
  __device__ void operator()(int64_t c, int64_t at, double* sum) const {
    const float d = dy[at];
    sum[0] += static_cast<double>(x[at] - mean[c]) * d;
    sum[1] += d;
  }
};

struct SetMean {
  float* mean;
  double count;
  __device__ void operator()(int64_t c, const double* sum) const { mean[c] = static_cast<float>(sum[0] / count); }
};
// The biased variance and the running update, in the CPU's float arithmetic.
struct SetVariance {
  const float* mean;
  const float* running_mean;
  const float* running_var;
  float* var;
  float* next_mean;
  float* next_var;
  double count;
  float momentum, unbias;
  __device__ void operator()(int64_t c, const double* sum) const {
    var[c] = static_cast<float>(sum[0] / count);
    next_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean[c];
    next_var[c] = (1 - momentum) * running_var[c] + momentum * (var[c] * unbias);
  }
};
// oneDNN's: dscale = (float sum) * 1/sqrt(var + epsilon); doffset = sum dy.
struct SetGradSums {
  const float* var;
  float epsilon;
  float* dscale;
  float* doffset;
  __device__ void operator()(int64_t c, const double* sum) const {
    dscale[c] = static_cast<float>(sum[0]) * (1.0f / sqrtf(var[c] + epsilon));
    doffset[c] = static_cast<float>(sum[1]);
  }
};

__global__ void BatchNormNormalizeKernel(const float* x, const float* scale, const float* offset, const float* mean,
                                         const float* var, float* y, int64_t n, int64_t channels, int64_t inner,
                                         float epsilon) {
  NEREID_GRID_LOOP(i, n) {
    const int64_t c = (i / inner) % channels;
    const float sm = scale[c] / sqrtf(var[c] + epsilon);
    y[i] = sm * (x[i] - mean[c]) + offset[c];
  }
}

// oneDNN's reference arithmetic: (dy - (doffset / M + (x - mean) * dscale *
// inv / M)) * (scale * inv), inv = 1 / sqrt(var + epsilon).
__global__ void BatchNormGradKernel(const float* dy, const float* x, const float* scale, const float* mean,
                                    const float* var, const float* dscale, const float* doffset, float* dx, int64_t n,
                                    int64_t channels, int64_t inner, float epsilon, float count) {
  NEREID_GRID_LOOP(i, n) {
    const int64_t c = (i / inner) % channels;
    const float inv = 1.0f / sqrtf(var[c] + epsilon);
    const float v = dy[i] - (doffset[c] / count + (x[i] - mean[c]) * dscale[c] * inv / count);
    dx[i] = v * (scale[c] * inv);
  }
}

// GELU and its slope in double (erf form or tanh form).
constexpr double kSqrtHalf = 0.70710678118654752440;       // 1 / sqrt(2)
constexpr double kInvSqrtTwoPi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

__device__ double GeluOf(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + tanh(kSqrtTwoOverPi * (x + kGeluCubic * x * x * x)));
  return 0.5 * x * (1 + erf(x * kSqrtHalf));
}

__device__ double GeluSlope(double x, bool tanh_form) {
  if (tanh_form) {
    const double t = tanh(kSqrtTwoOverPi * (x + kGeluCubic * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrtTwoOverPi * (1 + 3 * kGeluCubic * x * x);
  }
  return 0.5 * (1 + erf(x * kSqrtHalf)) + x * exp(-0.5 * x * x) * kInvSqrtTwoPi;
}

__global__ void GeluKernel(const float* x, float* y, int64_t n, bool tanh_form) {
  NEREID_GRID_LOOP(i, n) { y[i] = static_cast<float>(GeluOf(x[i], tanh_form)); }
}

__global__ void GeluGradKernel(const float* dy, const float* x, float* dx, int64_t n, bool tanh_form) {
  NEREID_GRID_LOOP(i, n) { dx[i] = static_cast<float>(dy[i] * GeluSlope(x[i], tanh_form)); }
}

// Line `line` of [outer, axis, inner]: its first element; its elements are
// `inner` apart.
__device__ int64_t LineStart(const Lines& l, int64_t line) {
  return line / l.inner * l.axis * l.inner + line % l.inner;
}

// A thread per line: the maximum (the loss kernels' comparison), then
// exp(x - max) in double, summed in order.
__global__ void SoftmaxKernel(const float* x, float* y, Lines l) {
  NEREID_GRID_LOOP(line, l.outer * l.inner) {
    const float* in = x + LineStart(l, line);
    float* out = y + LineStart(l, line);
    float max = in[0];
    for (int64_t j = 1; j < l.axis; ++j) max = in[j * l.inner] > max ? in[j * l.inner] : max;
    double sum = 0;
    for (int64_t j = 0; j < l.axis; ++j) sum += exp(static_cast<double>(in[j * l.inner]) - max);
    for (int64_t j = 0; j < l.axis; ++j) {
      out[j * l.inner] = static_cast<float>(exp(static_cast<double>(in[j * l.inner]) - max) / sum);
    }
  }
}

__global__ void SoftmaxGradKernel(const float* dy, const float* y, float* dx, Lines l) {
  NEREID_GRID_LOOP(line, l.outer * l.inner) {
    const int64_t start = LineStart(l, line);
    double dot = 0;
    for (int64_t j = 0; j < l.axis; ++j) {
      const int64_t at = start + j * l.inner;
      dot += static_cast<double>(dy[at]) * y[at];
    }
    const float s = static_cast<float>(dot);
    for (int64_t j = 0; j < l.axis; ++j) {
      const int64_t at = start + j * l.inner;
      dx[at] = y[at] * (dy[at] - s);
    }
  }
}

// ops/cpu/cpu_util.h's SumLanes, the same additions in the same order:
// lane l adds terms l, l + 8, ... of the whole groups of eight, from 0; the
// terms past them add into a tail, from 0; then the lanes pair up as a fixed
// tree and the tail comes last.
template <typename Term>
__device__ float SumLanes(int64_t n, Term term) {
  const int64_t whole = n / 8 * 8;
  float lane[8];
  for (int l = 0; l < 8; ++l) {
    lane[l] = 0;
    for (int64_t i = l; i < whole; i += 8) lane[l] += term(i);
  }
  float tail = 0;
  for (int64_t i = whole; i < n; ++i) tail += term(i);
  const float pairs[4] = {lane[0] + lane[1], lane[2] + lane[3], lane[4] + lane[5], lane[6] + lane[7]};
  return ((pairs[0] + pairs[1]) + (pairs[2] + pairs[3])) + tail;
}

// A thread per row: the host's mean and 1 / sqrt(var + epsilon).
__global__ void LayerNormStatsKernel(const float* x, int64_t rows, int64_t width, float epsilon, float* mean,
                                     float* rstd) {
  NEREID_GRID_LOOP(r, rows) {
    const float* row = x + r * width;
    const float mu = SumLanes(width, [&](int64_t i) { return row[i]; }) / static_cast<float>(width);
    const float squares = SumLanes(width, [&](int64_t i) { return (row[i] - mu) * (row[i] - mu); });
    mean[r] = mu;
    rstd[r] = 1.0f / sqrtf(squares / static_cast<float>(width) + epsilon);
  }
}

__global__ void LayerNormNormalizeKernel(const float* x, const float* scale, const float* bias, const float* mean,
                                         const float* rstd, float* y, int64_t n, int64_t width) {
  NEREID_GRID_LOOP(e, n) {
    const int64_t r = e / width, i = e % width;
    y[e] = (x[e] - mean[r]) * rstd[r] * scale[i] + bias[i];
  }
}

// A thread per row: mean(g) and mean(g * x_hat), g = dy * scale.
__global__ void LayerNormGradRowsKernel(const float* dy, const float* x, const float* scale, const float* mean,
                                        const float* rstd, int64_t rows, int64_t width, float* row_means) {
  const float inv_width = 1.0f / static_cast<float>(width);
  NEREID_GRID_LOOP(r, rows) {
    const float* row_dy = dy + r * width;
    const float* row_x = x + r * width;
    const float mu = mean[r], inv = rstd[r];
    const float sum_g = SumLanes(width, [&](int64_t i) { return row_dy[i] * scale[i]; });
    const float sum_gx = SumLanes(width, [&](int64_t i) { return row_dy[i] * scale[i] * (row_x[i] - mu) * inv; });
    row_means[2 * r] = sum_g * inv_width;
    row_means[2 * r + 1] = sum_gx * inv_width;
  }
}

// dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).
__global__ void LayerNormGradInputKernel(const float* dy, const float* x, const float* scale, const float* mean,
                                         const float* rstd, const float* row_means, float* dx, int64_t n,
                                         int64_t width) {
  NEREID_GRID_LOOP(e, n) {
    const int64_t r = e / width, i = e % width;
    const float inv = rstd[r];
    const float x_hat = (x[e] - mean[r]) * inv;
    dx[e] = inv * (dy[e] * scale[i] - row_means[2 * r] - x_hat * row_means[2 * r + 1]);
  }
}

// A thread per column adds its rows in order, in float, as the host.
__global__ void LayerNormGradParamsKernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                          int64_t rows, int64_t width, float* dscale, float* dbias) {
  NEREID_GRID_LOOP(i, width) {
    float ds = 0, db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float d = dy[r * width + i];
      ds += d * (x[r * width + i] - mean[r]) * rstd[r];
      db += d;
    }
    dscale[i] = ds;
    dbias[i] = db;
  }
}

template <typename T>
__global__ void TransposeKernel(const T* x, T* y, int64_t n, Strided v) {
  NEREID_GRID_LOOP(e, n) {
    int64_t rest = e, at = 0;
    for (int d = v.rank - 1; d >= 0; --d) {
      at += rest % v.out[d] * v.stride[d];
      rest /= v.out[d];
    }
    y[e] = x[at];
  }
}

__global__ void CausalMaskKernel(const float* x, float* y, int64_t n, int64_t queries, int64_t keys, float value) {
  NEREID_GRID_LOOP(e, n) {
    const int64_t r = e / keys, c = e % keys;
    y[e] = c < r % queries + keys - queries + 1 ? x[e] : value;
  }
}

// The table row id j picks (negative ids count from the end), or -1 when
// it is outside.
__device__ int64_t RowOf(const Ids& ids, int64_t j, int64_t rows) {
  const int64_t id = LabelAt(ids.data, ids.is64, j);
  const int64_t row = id < 0 ? id + rows : id;
  return row >= 0 && row < rows ? row : -1;
}

// One block: each thread finds the first bad id of its strided share; the
// block takes the least position.
__global__ void FindBadIdKernel(Ids ids, int64_t rows, int64_t* bad) {
  constexpr int64_t kNone = INT64_MAX;
  int64_t first[1] = {kNone};
  for (int64_t j = threadIdx.x; j < ids.count; j += blockDim.x) {
    if (RowOf(ids, j, rows) < 0) {
      first[0] = j;
      break;
    }
  }
  BlockReduce(first, Min());
  if (threadIdx.x == 0) {
    bad[0] = first[0] == kNone ? -1 : first[0];
    bad[1] = first[0] == kNone ? 0 : LabelAt(ids.data, ids.is64, first[0]);
  }
}

__global__ void GatherKernel(const float* params, Ids ids, Table t, float* y) {
  NEREID_GRID_LOOP(e, t.outer * ids.count * t.inner) {
    const int64_t i = e % t.inner, j = e / t.inner % ids.count, o = e / (t.inner * ids.count);
    const int64_t row = RowOf(ids, j, t.rows);
    y[e] = row < 0 ? 0.0f : params[(o * t.rows + row) * t.inner + i];
  }
}

// A thread per table row r: start[r] = how many ids pick a row before r, and
// the positions of the ids that pick r, in order, at order[start[r]..].
__global__ void ListRowsKernel(Ids ids, int64_t rows, int64_t* start, int64_t* order) {
  NEREID_GRID_LOOP(r, rows) {
    int64_t before = 0, here = 0;
    for (int64_t j = 0; j < ids.count; ++j) {
      const int64_t row = RowOf(ids, j, rows);
      before += row >= 0 && row < r ? 1 : 0;
      here += row == r ? 1 : 0;
    }
    start[r] = before;
    if (r == rows - 1) start[rows] = before + here;
    for (int64_t j = 0, at = before; j < ids.count; ++j) {
      if (RowOf(ids, j, rows) == r) order[at++] = j;
    }
  }
}

// A thread per element of dparams adds its row's dy elements in id order,
// from 0, in float: the host's loop.
__global__ void GatherGradKernel(const float* dy, int64_t count, Table t, const int64_t* start, const int64_t* order,
                                 float* dparams) {
  NEREID_GRID_LOOP(e, t.outer * t.rows * t.inner) {
    const int64_t i = e % t.inner, r = e / t.inner % t.rows, o = e / (t.inner * t.rows);
    float sum = 0.0f;
    for (int64_t k = start[r]; k < start[r + 1]; ++k) sum += dy[(o * count + order[k]) * t.inner + i];
    dparams[e] = sum;
  }
}

// Launchers clear the thread's last error before launching (a call before,
// such as an event query that found work not done, may have left one) and
// read it after: what remains is the launch's own.
void ClearLastError() { (void)cudaGetLastError(); }
int Launched() { return static_cast<int>(cudaGetLastError()); }

template <typename Row>
int LaunchMeanRowLoss(float margin, const float* logits, const void* labels, bool is64, int64_t rows, int64_t classes,
                      int64_t ignore_index, float* loss, cudaStream_t stream) {
  MeanRowLossKernel<Row><<<1, kThreads, 0, stream>>>(logits, labels, is64, rows, classes, ignore_index, margin, loss);
  return Launched();
}

template <typename Row>
int LaunchMeanRowLossGrad(float margin, const float* logits, const void* labels, bool is64, int64_t rows,
                          int64_t classes, int64_t ignore_index, const float* dloss, float* labelled, float* dlogits,
                          cudaStream_t stream) {
  CountLabelledKernel<<<1, kThreads, 0, stream>>>(labels, is64, rows, ignore_index, labelled);
  if (int error = Launched(); error != 0) return error;
  MeanRowLossGradKernel<Row><<<Blocks(rows), kThreads, 0, stream>>>(logits, labels, is64, rows, classes, ignore_index,
                                                                    margin, dloss, labelled, dlogits);
  return Launched();
}

// f(Row{}) for the loss's row type.
template <typename F>
int WithRow(RowLoss kind, F f) {
  switch (kind) {
    case RowLoss::kHinge:
      return f(HingeRow{});
    case RowLoss::kLogistic:
      return f(LogisticRow{});
    case RowLoss::kSoftmaxCrossEntropy:
      break;
  }
  return f(SoftmaxCrossEntropyRow{});
}

// The K per-channel sums of Term over x viewed as [outer, channels, inner],
// handed to Finish.
template <int K, typename Term, typename Finish>
int ChannelSums(Term term, Finish finish, int64_t outer, int64_t channels, int64_t inner, double* partials,
                cudaStream_t stream) {
  const int64_t chunks = ChunksOf(outer * inner);
  if (channels * chunks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);  // grid.x's limit
  ChannelPartialsKernel<K><<<static_cast<unsigned>(channels * chunks), kThreads, 0, stream>>>(term, outer, channels,
                                                                                              inner, chunks, partials);
  if (int error = Launched(); error != 0) return error;
  ChannelTotalsKernel<K><<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(partials, chunks, finish);
  return Launched();
}

}  // namespace

int Fill(float* y, float value, int64_t n, void* stream) {
  ClearLastError();
  FillKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(y, value, n);
  return Launched();
}

int Scale(const float* x, float scale, float* y, int64_t n, void* stream) {
  ClearLastError();
  ScaleKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(x, scale, y, n);
  return Launched();
}

int BiasAdd(const float* x, const float* bias, float* y, int64_t outer, int64_t channels, int64_t inner,
            void* stream) {
  ClearLastError();
  const int64_t n = outer * channels * inner;
  BiasAddKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(x, bias, y, n, channels, inner);
  return Launched();
}

int BiasAddGrad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner, void* stream) {
  ClearLastError();
  BiasAddGradKernel<<<static_cast<unsigned>(channels), kThreads, 0, AsStream(stream)>>>(dy, db, outer, channels,
                                                                                        inner);
  return Launched();
}

int MeanRowLoss(RowLoss kind, float margin, const float* logits, const void* labels, bool labels_are_int64,
                int64_t rows, int64_t classes, int64_t ignore_index, float* loss, void* stream) {
  ClearLastError();
  return WithRow(kind, [&](auto row) {
    return LaunchMeanRowLoss<decltype(row)>(margin, logits, labels, labels_are_int64, rows, classes, ignore_index, loss,
                                            AsStream(stream));
  });
}

int MeanRowLossGrad(RowLoss kind, float margin, const float* logits, const void* labels, bool labels_are_int64,
                    int64_t rows, int64_t classes, int64_t ignore_index, const float* dloss, float* labelled,
                    float* dlogits, void* stream) {
  ClearLastError();
  return WithRow(kind, [&](auto row) {
    return LaunchMeanRowLossGrad<decltype(row)>(margin, logits, labels, labels_are_int64, rows, classes, ignore_index,
                                                dloss, labelled, dlogits, AsStream(stream));
  });
}

int Sgd(const float* p, const float* g, const float* lr, const float* v, float* np, float* nv, int64_t n,
        float momentum, float weight_decay, bool nesterov, void* stream) {
  ClearLastError();
  if (v == nullptr) {
    SgdKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(p, g, lr, np, n, weight_decay);
  } else {
    MomentumKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(p, g, lr, v, np, nv, n, momentum, weight_decay,
                                                                 nesterov);
  }
  return Launched();
}

int MaxPoolGrad(const float* x, const float* dy, float* dx, int64_t planes, int64_t in_h, int64_t in_w,
                int64_t out_h, int64_t out_w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pad_top,
                int64_t pad_left, void* stream) {
  ClearLastError();
  MaxPoolGradKernel<<<Blocks(planes * in_h * in_w), kThreads, 0, AsStream(stream)>>>(
      x, dy, dx, planes, in_h, in_w, out_h, out_w, kh, kw, sh, sw, pad_top, pad_left);
  return Launched();
}

int Dropout(const float* x, float* y, int64_t n, uint64_t stream_seed, uint64_t threshold, float scale,
            void* stream) {
  ClearLastError();
  DropoutKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(x, y, n, stream_seed, threshold, scale);
  return Launched();
}

int Adam(const float* p, const float* g, const float* lr, const float* m, const float* v, float* np, float* nm,
         float* nv, int64_t n, const AdamHyper& hyper, void* stream) {
  ClearLastError();
  AdamKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(p, g, lr, m, v, np, nm, nv, n, hyper);
  return Launched();
}

int BroadcastBinary(BinaryOp op, const float* a, const float* b, float* y, int64_t n, const Broadcast& shape,
                    void* stream) {
  ClearLastError();
  const auto launch = [&](auto f) {
    BroadcastBinaryKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(f, a, b, y, n, shape);
  };
  switch (op) {
    case BinaryOp::kAdd:
      launch(Plus());
      break;
    case BinaryOp::kSub:
      launch(Minus());
      break;
    case BinaryOp::kMul:
      launch(Times());
      break;
    case BinaryOp::kDiv:
      launch(Divides());
      break;
  }
  return Launched();
}

int ReduceToShape(const float* dy, float* dx, int64_t n, const Broadcast& shape, void* stream) {
  ClearLastError();
  ReduceToShapeKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(dy, dx, n, shape);
  return Launched();
}

int AddN(const float* const* inputs, int count, float* y, int64_t n, void* stream) {
  ClearLastError();
  for (int begin = 0; begin < count; begin += kSummands) {
    Summands s = {};
    const int here = count - begin < kSummands ? count - begin : kSummands;
    for (int k = 0; k < here; ++k) s.in[k] = inputs[begin + k];
    AccumulateKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(s, here, begin == 0, y, n);
    if (int error = Launched(); error != 0) return error;
  }
  return 0;
}

int GlobalAvgPool(const float* x, float* y, int64_t planes, int64_t area, float scale, void* stream) {
  ClearLastError();
  GlobalAvgPoolKernel<<<Blocks(planes), kThreads, 0, AsStream(stream)>>>(x, y, planes, area, scale);
  return Launched();
}

int GlobalAvgPoolGrad(const float* dy, float* dx, int64_t planes, int64_t area, float scale, void* stream) {
  ClearLastError();
  GlobalAvgPoolGradKernel<<<Blocks(planes * area), kThreads, 0, AsStream(stream)>>>(dy, dx, planes, area, scale);
  return Launched();
}

int64_t BatchNormScratchDoubles(int64_t channels, int64_t per_channel) { return channels * ChunksOf(per_channel) * 2; }

int BatchNormTraining(const float* x, const float* scale, const float* offset, const float* running_mean,
                      const float* running_var, float* y, float* mean, float* var, float* next_mean, float* next_var,
                      int64_t outer, int64_t channels, int64_t inner, float epsilon, float momentum, float unbias,
                      double* partials, void* stream) {
  ClearLastError();
  const cudaStream_t s = AsStream(stream);
  const double count = static_cast<double>(outer * inner);
  // The variance sums deviations from the mean (two passes, as the CPU).
  if (int error = ChannelSums<1>(SumOfX{x}, SetMean{mean, count}, outer, channels, inner, partials, s); error != 0) {
    return error;
  }
  const SetVariance set_variance{mean, running_mean, running_var, var, next_mean, next_var, count, momentum, unbias};
  if (int error = ChannelSums<1>(SquaredDeviation{x, mean}, set_variance, outer, channels, inner, partials, s);
      error != 0) {
    return error;
  }
  const int64_t n = outer * channels * inner;
  BatchNormNormalizeKernel<<<Blocks(n), kThreads, 0, s>>>(x, scale, offset, mean, var, y, n, channels, inner, epsilon);
  return Launched();
}

int BatchNormInference(const float* x, const float* scale, const float* offset, const float* mean, const float* var,
                       float* y, int64_t outer, int64_t channels, int64_t inner, float epsilon, void* stream) {
  ClearLastError();
  const int64_t n = outer * channels * inner;
  BatchNormNormalizeKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(x, scale, offset, mean, var, y, n, channels,
                                                                         inner, epsilon);
  return Launched();
}

int BatchNormGrad(const float* dy, const float* x, const float* scale, const float* mean, const float* var, float* dx,
                  float* dscale, float* doffset, int64_t outer, int64_t channels, int64_t inner, float epsilon,
                  double* partials, void* stream) {
  ClearLastError();
  const cudaStream_t s = AsStream(stream);
  if (int error = ChannelSums<2>(GradSums{dy, x, mean}, SetGradSums{var, epsilon, dscale, doffset}, outer, channels,
                                 inner, partials, s);
      error != 0) {
    return error;
  }
  const int64_t n = outer * channels * inner;
  BatchNormGradKernel<<<Blocks(n), kThreads, 0, s>>>(dy, x, scale, mean, var, dscale, doffset, dx, n, channels, inner,
                                                     epsilon, static_cast<float>(outer * inner));
  return Launched();
}

int Gelu(const float* x, float* y, int64_t n, bool tanh_form, void* stream) {
  ClearLastError();
  GeluKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(x, y, n, tanh_form);
  return Launched();
}

int GeluGrad(const float* dy, const float* x, float* dx, int64_t n, bool tanh_form, void* stream) {
  ClearLastError();
  GeluGradKernel<<<Blocks(n), kThreads, 0, AsStream(stream)>>>(dy, x, dx, n, tanh_form);
  return Launched();
}

int Softmax(const float* x, float* y, const Lines& lines, void* stream) {
  ClearLastError();
  SoftmaxKernel<<<Blocks(lines.outer * lines.inner), kThreads, 0, AsStream(stream)>>>(x, y, lines);
  return Launched();
}

int SoftmaxGrad(const float* dy, const float* y, float* dx, const Lines& lines, void* stream) {
  ClearLastError();
  SoftmaxGradKernel<<<Blocks(lines.outer * lines.inner), kThreads, 0, AsStream(stream)>>>(dy, y, dx, lines);
  return Launched();
}

int LayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean, float* rstd, int64_t rows,
              int64_t width, float epsilon, void* stream) {
  ClearLastError();
  const cudaStream_t s = AsStream(stream);
  LayerNormStatsKernel<<<Blocks(rows), kThreads, 0, s>>>(x, rows, width, epsilon, mean, rstd);
  if (int error = Launched(); error != 0 || width == 0) return error;
  LayerNormNormalizeKernel<<<Blocks(rows * width), kThreads, 0, s>>>(x, scale, bias, mean, rstd, y, rows * width,
                                                                     width);
  return Launched();
}

int LayerNormGrad(const float* dy, const float* x, const float* scale, const float* mean, const float* rstd, float* dx,
                  float* dscale, float* dbias, int64_t rows, int64_t width, float* row_means, void* stream) {
  ClearLastError();
  const cudaStream_t s = AsStream(stream);
  if (rows > 0 && width > 0) {
    LayerNormGradRowsKernel<<<Blocks(rows), kThreads, 0, s>>>(dy, x, scale, mean, rstd, rows, width, row_means);
    if (int error = Launched(); error != 0) return error;
    LayerNormGradInputKernel<<<Blocks(rows * width), kThreads, 0, s>>>(dy, x, scale, mean, rstd, row_means, dx,
                                                                       rows * width, width);
    if (int error = Launched(); error != 0) return error;
  }
  if (width == 0) return 0;
  LayerNormGradParamsKernel<<<Blocks(width), kThreads, 0, s>>>(dy, x, mean, rstd, rows, width, dscale, dbias);
  return Launched();
}

int Transpose(const void* x, void* y, int element_bytes, int64_t n, const Strided& view, void* stream) {
  ClearLastError();
  const cudaStream_t s = AsStream(stream);
  if (element_bytes == 4) {
    TransposeKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), n, view);
  } else if (element_bytes == 8) {
    TransposeKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), n, view);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return Launched();
}

int CausalMask(const float* x, float* y, int64_t rows, int64_t queries, int64_t keys, float value, void* stream) {
  ClearLastError();
  CausalMaskKernel<<<Blocks(rows * keys), kThreads, 0, AsStream(stream)>>>(x, y, rows * keys, queries, keys, value);
  return Launched();
}

int FindBadId(const Ids& ids, int64_t rows, int64_t* bad, void* stream) {
  ClearLastError();
  FindBadIdKernel<<<1, kThreads, 0, AsStream(stream)>>>(ids, rows, bad);
  return Launched();
}

int Gather(const float* params, const Ids& ids, const Table& table, float* y, void* stream) {
  ClearLastError();
  GatherKernel<<<Blocks(table.outer * ids.count * table.inner), kThreads, 0, AsStream(stream)>>>(params, ids, table, y);
  return Launched();
}

int64_t GatherGradScratch(const Table& table, const Ids& ids) { return table.rows + 1 + ids.count; }

int GatherGrad(const float* dy, const Ids& ids, const Table& table, float* dparams, int64_t* scratch, void* stream) {
  ClearLastError();
  const cudaStream_t s = AsStream(stream);
  int64_t* start = scratch;
  int64_t* order = scratch + table.rows + 1;
  ListRowsKernel<<<Blocks(table.rows), kThreads, 0, s>>>(ids, table.rows, start, order);
  if (int error = Launched(); error != 0) return error;
  GatherGradKernel<<<Blocks(table.outer * table.rows * table.inner), kThreads, 0, s>>>(dy, ids.count, table, start,
                                                                                       order, dparams);
  return Launched();
}

}  // namespace nereid::cuda::math
