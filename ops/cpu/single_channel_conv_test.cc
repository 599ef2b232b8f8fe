// The direct one-channel convolution against a plain double-precision
// reference, on lenet's shape and on ragged ones (columns not a multiple of
// eight, uneven padding, VALID windows).

#include "ops/cpu/single_channel_conv.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace cpu {
namespace {

struct Case {
  int64_t batch, in_h, in_w, out_channels, kh, kw, pad_top, pad_bottom, pad_left, pad_right;
};

SingleChannelConvShape ShapeOf(const Case& c) {
  return SingleChannelConvShape{c.batch,
                                c.in_h,
                                c.in_w,
                                c.out_channels,
                                c.kh,
                                c.kw,
                                c.in_h + c.pad_top + c.pad_bottom - c.kh + 1,
                                c.in_w + c.pad_left + c.pad_right - c.kw + 1,
                                c.pad_top,
                                c.pad_left};
}

// x at (n, h, w) of the padded image, 0 outside the input.
double At(const SingleChannelConvShape& s, const std::vector<float>& x, int64_t n, int64_t h, int64_t w) {
  h -= s.pad_top;
  w -= s.pad_left;
  if (h < 0 || h >= s.in_h || w < 0 || w >= s.in_w) return 0;
  return x[(n * s.in_h + h) * s.in_w + w];
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

class SingleChannelConvTest : public ::testing::TestWithParam<Case> {};

TEST_P(SingleChannelConvTest, ForwardAndFilterGradientMatchTheReference) {
  const SingleChannelConvShape s = ShapeOf(GetParam());
  if (!SingleChannelConvApplies(s, 1, 1, 1, 1, 1, 1)) GTEST_SKIP() << "no AVX2 and FMA on this machine";
  std::mt19937 rng(3);
  std::vector<float> x = Random(s.batch * s.in_h * s.in_w, rng);
  std::vector<float> filter = Random(s.out_channels * s.kh * s.kw, rng);
  std::vector<float> dy = Random(s.batch * s.out_channels * s.out_h * s.out_w, rng);
  std::vector<float> padded(s.batch * PaddedHeight(s) * PaddedWidth(s), -1.0f);
  PadImages(s, x.data(), 0, s.batch, padded.data());
  std::vector<float> y(dy.size(), NAN), grad(filter.size(), NAN);
  // In two pieces, as two threads would split them.
  SingleChannelConvForward(s, padded.data(), filter.data(), y.data(), 0, s.batch / 2);
  SingleChannelConvForward(s, padded.data(), filter.data(), y.data(), s.batch / 2, s.batch);
  SingleChannelConvFilterGrad(s, padded.data(), dy.data(), grad.data(), 0, 1);
  SingleChannelConvFilterGrad(s, padded.data(), dy.data(), grad.data(), 1, s.out_channels);

  double worst = 0;
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t o = 0; o < s.out_channels; ++o) {
      for (int64_t h = 0; h < s.out_h; ++h) {
        for (int64_t w = 0; w < s.out_w; ++w) {
          double want = 0;
          for (int64_t r = 0; r < s.kh; ++r) {
            for (int64_t c = 0; c < s.kw; ++c) want += filter[(o * s.kh + r) * s.kw + c] * At(s, x, n, h + r, w + c);
          }
          const float got = y[((n * s.out_channels + o) * s.out_h + h) * s.out_w + w];
          worst = std::max(worst, std::abs(got - want) / (1 + std::abs(want)));
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-5) << "forward";
  worst = 0;
  for (int64_t o = 0; o < s.out_channels; ++o) {
    for (int64_t r = 0; r < s.kh; ++r) {
      for (int64_t c = 0; c < s.kw; ++c) {
        double want = 0, scale = 0;
        for (int64_t n = 0; n < s.batch; ++n) {
          for (int64_t h = 0; h < s.out_h; ++h) {
            for (int64_t w = 0; w < s.out_w; ++w) {
              const double term = dy[((n * s.out_channels + o) * s.out_h + h) * s.out_w + w] * At(s, x, n, h + r, w + c);
              want += term;
              scale += std::abs(term);
            }
          }
        }
        worst = std::max(worst, std::abs(grad[(o * s.kh + r) * s.kw + c] - want) / (1 + scale));
      }
    }
  }
  EXPECT_LT(worst, 1e-6) << "filter gradient";
}

INSTANTIATE_TEST_SUITE_P(Shapes, SingleChannelConvTest,
                         ::testing::Values(Case{4, 28, 28, 6, 5, 5, 2, 2, 2, 2},     // lenet's conv1
                                           Case{3, 13, 17, 7, 3, 7, 1, 0, 3, 1},     // ragged, uneven pads
                                           Case{2, 9, 9, 1, 9, 9, 0, 0, 0, 0},       // one output position
                                           Case{5, 6, 30, 13, 2, 16, 0, 1, 0, 2}));  // widest kernel

}  // namespace
}  // namespace cpu
}  // namespace nereid
