#ifndef NEREID_OPS_POINT_TO_POINT_TAG_H_
#define NEREID_OPS_POINT_TO_POINT_TAG_H_

// The tag of a point-to-point transfer (Send/Recv, CodedSend/CodedGather):
// evaluation or training, header or body, the pair's channel (10 bits) and
// the step (training) or batch (evaluation), 20 bits. Both ends compute it
// alike, so transfers between two ranks are told apart by it, not by order.

#include <cstdint>

#include "ops/kernel.h"

namespace nereid {

inline constexpr int64_t kMaxPointToPointChannels = 1 << 10;

inline uint32_t PointToPointTag(int64_t channel, const StepInfo& step, bool header) {
  const int64_t key = step.issue_key();
  return (step.training ? 0u : 1u << 31) | (header ? 1u << 30 : 0u) | static_cast<uint32_t>(channel) << 20 |
         static_cast<uint32_t>(key & 0xFFFFF);
}

}  // namespace nereid

#endif  // NEREID_OPS_POINT_TO_POINT_TAG_H_
