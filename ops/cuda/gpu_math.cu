// The project's own CUDA kernels (see gpu_math.h). Each mirrors its CPU
// kernel's arithmetic; where the CPU sums in double (losses), so does the
// device (the loss's rows as strided shares added as a tree; the gradient
// one thread per row). Built with -fmad=false: the CPU kernels do not fuse
// multiply-adds, so neither do these.

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
// adds the shares as a tree (a fixed order: the result is the same every run).
__global__ void BiasAddGradKernel(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner) {
  __shared__ float partial[kThreads];
  const int64_t c = blockIdx.x;
  const int64_t per_channel = outer * inner;
  float sum = 0;
  for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const int64_t n = j / inner, i = j % inner;
    sum += dy[(n * channels + c) * inner + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = partial[0];
}

__device__ int64_t LabelAt(const void* labels, bool is64, int64_t row) {
  return is64 ? static_cast<const int64_t*>(labels)[row] : static_cast<int64_t>(static_cast<const int32_t*>(labels)[row]);
}

// -log softmax(s)[y] as the CPU computes it; NaN for a label out of range.
__device__ double RowLoss(const float* s, int64_t k, int64_t y) {
  if (y < 0 || y >= k) return nan("");
  float max = s[0];
  for (int64_t j = 1; j < k; ++j) max = s[j] > max ? s[j] : max;
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += exp(static_cast<double>(s[j] - max));
  return log(sum) + max - s[y];
}

// One block: each thread sums a strided share of the rows in double; the
// block adds the shares as a tree.
__global__ void SoftmaxCrossEntropyKernel(const float* logits, const void* labels, bool is64, int64_t rows, int64_t k,
                                          int64_t ignore_index, float* loss) {
  __shared__ double total[kThreads];
  __shared__ double count[kThreads];
  double t = 0, c = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t y = LabelAt(labels, is64, r);
    if (y == ignore_index) continue;
    t += RowLoss(logits + r * k, k, y);
    c += 1;
  }
  total[threadIdx.x] = t;
  count[threadIdx.x] = c;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      total[threadIdx.x] += total[threadIdx.x + width];
      count[threadIdx.x] += count[threadIdx.x + width];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = count[0] > 0 ? static_cast<float>(total[0] / count[0]) : 0.0f;
}

__global__ void CountLabelledKernel(const void* labels, bool is64, int64_t rows, int64_t ignore_index,
                                    float* labelled) {
  __shared__ double count[kThreads];
  double c = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) c += LabelAt(labels, is64, r) != ignore_index ? 1 : 0;
  count[threadIdx.x] = c;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) count[threadIdx.x] += count[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) labelled[0] = static_cast<float>(count[0]);
}

// One thread per row: softmax, minus one at the label, times dloss / labelled.
__global__ void SoftmaxCrossEntropyGradKernel(const float* logits, const void* labels, bool is64, int64_t rows,
                                              int64_t k, int64_t ignore_index, const float* dloss,
                                              const float* labelled, float* dlogits) {
  NEREID_GRID_LOOP(r, rows) {
    const float* s = logits + r * k;
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
    float max = s[0];
    for (int64_t j = 1; j < k; ++j) max = s[j] > max ? s[j] : max;
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += exp(static_cast<double>(s[j] - max));
    for (int64_t j = 0; j < k; ++j) ds[j] = static_cast<float>(exp(static_cast<double>(s[j] - max)) / sum);
    ds[y] -= 1;
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

// Launchers clear the thread's last error before launching (a call before,
// such as an event query that found work not done, may have left one) and
// read it after: what remains is the launch's own.
void ClearLastError() { (void)cudaGetLastError(); }
int Launched() { return static_cast<int>(cudaGetLastError()); }

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

int SoftmaxCrossEntropy(const float* logits, const void* labels, bool labels_are_int64, int64_t rows,
                        int64_t classes, int64_t ignore_index, float* loss, void* stream) {
  ClearLastError();
  SoftmaxCrossEntropyKernel<<<1, kThreads, 0, AsStream(stream)>>>(logits, labels, labels_are_int64, rows, classes,
                                                                   ignore_index, loss);
  return Launched();
}

int SoftmaxCrossEntropyGrad(const float* logits, const void* labels, bool labels_are_int64, int64_t rows,
                            int64_t classes, int64_t ignore_index, const float* dloss, float* labelled,
                            float* dlogits, void* stream) {
  ClearLastError();
  CountLabelledKernel<<<1, kThreads, 0, AsStream(stream)>>>(labels, labels_are_int64, rows, ignore_index, labelled);
  if (int error = Launched(); error != 0) return error;
  SoftmaxCrossEntropyGradKernel<<<Blocks(rows), kThreads, 0, AsStream(stream)>>>(
      logits, labels, labels_are_int64, rows, classes, ignore_index, dloss, labelled, dlogits);
  return Launched();
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

}  // namespace nereid::cuda::math
