#include "ops/cpu/single_channel_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace nereid {
namespace cpu {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kMaxKernelWidth = 16;
constexpr int64_t kChannelBlock = 6;  // accumulators held in registers at once

int64_t ColumnBlocks(const SingleChannelConvShape& s) { return (s.out_w + kLanes - 1) / kLanes; }

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// One block of kCount output channels for one output row: the channels'
// sums stay in registers (the counts are compile-time constants so the
// compiler unrolls the channel loops; with run-time counts they went to the
// stack and the kernel ran at a third of its speed).
template <int kCount>
__attribute__((target("avx2,fma"))) void ForwardRow(const SingleChannelConvShape& s, const float* image,
                                                     const float* filter, float* y, int64_t n, int64_t oh,
                                                     int64_t o0) {
  const int64_t pw = PaddedWidth(s), blocks = ColumnBlocks(s);
  alignas(32) float tail[kLanes];
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 acc[kCount];
#pragma GCC unroll 8
    for (int o = 0; o < kCount; ++o) acc[o] = _mm256_setzero_ps();
    for (int64_t r = 0; r < s.kh; ++r) {
      const float* row = image + (oh + r) * pw + b * kLanes;
      const float* w = filter + (o0 * s.kh + r) * s.kw;
      for (int64_t c = 0; c < s.kw; ++c) {
        const __m256 xv = _mm256_loadu_ps(row + c);
#pragma GCC unroll 8
        for (int o = 0; o < kCount; ++o) acc[o] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + o * s.kh * s.kw + c), xv, acc[o]);
      }
    }
    const int64_t columns = std::min(kLanes, s.out_w - b * kLanes);
#pragma GCC unroll 8
    for (int o = 0; o < kCount; ++o) {
      float* out = y + ((n * s.out_channels + o0 + o) * s.out_h + oh) * s.out_w + b * kLanes;
      if (columns == kLanes) {
        _mm256_storeu_ps(out, acc[o]);
      } else {
        _mm256_store_ps(tail, acc[o]);
        std::memcpy(out, tail, columns * sizeof(float));
      }
    }
  }
}

using ForwardRowFn = void (*)(const SingleChannelConvShape&, const float*, const float*, float*, int64_t, int64_t,
                              int64_t);
constexpr ForwardRowFn kForwardRows[kChannelBlock] = {&ForwardRow<1>, &ForwardRow<2>, &ForwardRow<3>,
                                                      &ForwardRow<4>, &ForwardRow<5>, &ForwardRow<6>};

// The gradient of one filter row (o, r): kKw sums, one per filter column,
// each eight lanes wide, in registers (kKw a compile-time constant, as above).
template <int kKw>
__attribute__((target("avx2,fma"))) void FilterGradRow(const SingleChannelConvShape& s, const float* padded,
                                                        const float* dy, float* filter_grad, int64_t o, int64_t r,
                                                        const int32_t* last_mask_bits) {
  const int64_t ph = PaddedHeight(s), pw = PaddedWidth(s), blocks = ColumnBlocks(s);
  const __m256i last_mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(last_mask_bits));
  __m256 acc[kKw];
#pragma GCC unroll 16
  for (int c = 0; c < kKw; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* image = padded + n * ph * pw;
    const float* grad = dy + (n * s.out_channels + o) * s.out_h * s.out_w;
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const float* grad_row = grad + oh * s.out_w;
      const float* row = image + (oh + r) * pw;
      for (int64_t b = 0; b < blocks; ++b) {
        // Columns past out_w read as 0: a masked load, which touches no
        // memory past the row (a copy of the tail instead doubled the
        // kernel's time on lenet), so the padding they meet adds nothing.
        const __m256 g = b + 1 < blocks ? _mm256_loadu_ps(grad_row + b * kLanes)
                                        : _mm256_maskload_ps(grad_row + b * kLanes, last_mask);
#pragma GCC unroll 16
        for (int c = 0; c < kKw; ++c) acc[c] = _mm256_fmadd_ps(g, _mm256_loadu_ps(row + b * kLanes + c), acc[c]);
      }
    }
  }
  alignas(32) float lanes[kLanes];
#pragma GCC unroll 16
  for (int c = 0; c < kKw; ++c) {
    _mm256_store_ps(lanes, acc[c]);
    filter_grad[(o * s.kh + r) * s.kw + c] =
        ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }
}

using FilterGradRowFn = void (*)(const SingleChannelConvShape&, const float*, const float*, float*, int64_t,
                                 int64_t, const int32_t*);
template <size_t... I>
constexpr std::array<FilterGradRowFn, sizeof...(I)> FilterGradRows(std::index_sequence<I...>) {
  return {&FilterGradRow<static_cast<int>(I) + 1>...};
}
constexpr std::array<FilterGradRowFn, kMaxKernelWidth> kFilterGradRows =
    FilterGradRows(std::make_index_sequence<kMaxKernelWidth>());

}  // namespace

bool SingleChannelConvApplies(const SingleChannelConvShape& s, int64_t in_channels, int64_t groups,
                              int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w) {
  return HasAvx2Fma() && in_channels == 1 && groups == 1 && stride_h == 1 && stride_w == 1 && dilation_h == 1 &&
         dilation_w == 1 && s.kh >= 1 && s.kw >= 1 && s.kw <= kMaxKernelWidth && s.out_h >= 1 && s.out_w >= 1 &&
         s.out_channels >= 1 && s.pad_top >= 0 && s.pad_left >= 0;
}

int64_t PaddedHeight(const SingleChannelConvShape& s) { return s.out_h + s.kh - 1; }
int64_t PaddedWidth(const SingleChannelConvShape& s) { return ColumnBlocks(s) * kLanes + s.kw - 1; }

void PadImages(const SingleChannelConvShape& s, const float* x, int64_t n_begin, int64_t n_end, float* padded) {
  const int64_t ph = PaddedHeight(s), pw = PaddedWidth(s);
  for (int64_t n = n_begin; n < n_end; ++n) {
    float* image = padded + n * ph * pw;
    std::fill(image, image + ph * pw, 0.0f);
    for (int64_t h = 0; h < s.in_h; ++h) {
      const int64_t row = h + s.pad_top;
      if (row >= ph) break;
      const int64_t columns = std::min(s.in_w, pw - s.pad_left);
      if (columns > 0) std::memcpy(image + row * pw + s.pad_left, x + (n * s.in_h + h) * s.in_w, columns * sizeof(float));
    }
  }
}

// The loops over samples, rows and channel blocks need no AVX2 themselves:
// the row kernels they call carry it.
void SingleChannelConvForward(const SingleChannelConvShape& s, const float* padded, const float* filter, float* y,
                              int64_t n_begin, int64_t n_end) {
  const int64_t image_size = PaddedHeight(s) * PaddedWidth(s);
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      for (int64_t o0 = 0; o0 < s.out_channels; o0 += kChannelBlock) {
        const int64_t count = std::min(kChannelBlock, s.out_channels - o0);
        kForwardRows[count - 1](s, padded + n * image_size, filter, y, n, oh, o0);
      }
    }
  }
}

void SingleChannelConvFilterGrad(const SingleChannelConvShape& s, const float* padded, const float* dy,
                                 float* filter_grad, int64_t o_begin, int64_t o_end) {
  const int64_t last = s.out_w - (ColumnBlocks(s) - 1) * kLanes;  // columns in the last block
  alignas(32) int32_t last_mask_bits[kLanes];  // once per call, not per row
  for (int64_t l = 0; l < kLanes; ++l) last_mask_bits[l] = l < last ? -1 : 0;
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t r = 0; r < s.kh; ++r) kFilterGradRows[s.kw - 1](s, padded, dy, filter_grad, o, r, last_mask_bits);
  }
}

}  // namespace cpu
}  // namespace nereid
