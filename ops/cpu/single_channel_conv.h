#ifndef NEREID_OPS_CPU_SINGLE_CHANNEL_CONV_H_
#define NEREID_OPS_CPU_SINGLE_CHANNEL_CONV_H_

// Convolutions of one input channel (a network's first layer on gray
// images: lenet's conv1), computed directly with AVX2 and FMA, eight output
// columns at a time. oneDNN's kernels block channels by 8 or 16, which one
// input channel and a few output channels leave mostly empty, and they add a
// reorder on each side: on lenet's conv1 (1 -> 6 channels, 5x5, 28x28) they
// ran at about a third of this speed.
//
// Stride and dilation 1, any padding and kernel size up to 16 wide; the
// caller checks Applies() and otherwise uses oneDNN. Every sum runs in a
// fixed order, so results do not depend on the thread count.

#include <cstdint>

namespace nereid {
namespace cpu {

struct SingleChannelConvShape {
  int64_t batch = 0, in_h = 0, in_w = 0;      // x: [batch, 1, in_h, in_w]
  int64_t out_channels = 0, kh = 0, kw = 0;   // filter: [out_channels, 1, kh, kw]
  int64_t out_h = 0, out_w = 0;               // y: [batch, out_channels, out_h, out_w]
  int64_t pad_top = 0, pad_left = 0;          // the rest of the padding is implied
};

// Whether this machine and shape can take the direct path (AVX2 and FMA,
// stride and dilation 1, one input channel, one group, kw <= 16).
bool SingleChannelConvApplies(const SingleChannelConvShape& s, int64_t in_channels, int64_t groups,
                              int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w);

// The images zero-padded so that every window of every output column block
// reads inside the buffer: [batch, PaddedHeight, PaddedWidth].
int64_t PaddedHeight(const SingleChannelConvShape& s);
int64_t PaddedWidth(const SingleChannelConvShape& s);
void PadImages(const SingleChannelConvShape& s, const float* x, int64_t n_begin, int64_t n_end, float* padded);

// y for samples [n_begin, n_end) from the padded images.
void SingleChannelConvForward(const SingleChannelConvShape& s, const float* padded, const float* filter, float* y,
                              int64_t n_begin, int64_t n_end);

// The filter's gradient for output channels [o_begin, o_end): every sample
// and position summed, eight columns to a lane, lanes added in a fixed order.
void SingleChannelConvFilterGrad(const SingleChannelConvShape& s, const float* padded, const float* dy,
                                 float* filter_grad, int64_t o_begin, int64_t o_end);

}  // namespace cpu
}  // namespace nereid

#endif  // NEREID_OPS_CPU_SINGLE_CHANNEL_CONV_H_
