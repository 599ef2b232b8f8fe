#ifndef NEREID_COMPRESS_LOW_RANK_PUSH_H_
#define NEREID_COMPRESS_LOW_RANK_PUSH_H_

// Low-rank pushes for push-sum gossip (gossip, then compress(powersgd)).
//
// A push goes over one directed edge of the gossip graph. Sender and receiver
// each keep a reference for the edge: what the receiver has decoded from it
// so far, equal on both ends bit for bit. A push sends the sender's value x
// as the rank-r difference from that reference, D = x - reference ~ P Q^T,
// found by one power iteration warm-started from the edge's last Q (PowerSGD's
// step, but on one sender's D: P = D Q, orthonormalised, then Q = D^T P,
// with no round trip). Both ends then add P Q^T to the reference with the
// same function, so the decoded value is the same on both; the sender keeps
// x - decoded (push-sum's mass is conserved: nothing is lost, only delayed),
// and as x drifts slowly the references follow it closely.
//
// A push is a bucket of segments (the gossip pass packs values into one
// message): a segment of rank 0 is sent exactly (biases, small tensors),
// others as rows x cols matrices (dims[0] x the rest). An edge's first push
// is exact too, so the references start at the model rather than at zero.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace nereid {

struct PushSegment {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rank = 0;  // 0: sent exactly
};

class LowRankPush {
 public:
  // Checks the segments: positive sizes, 0 <= rank < min(rows, cols).
  static absl::StatusOr<LowRankPush> Create(std::vector<PushSegment> segments);

  const std::vector<PushSegment>& segments() const { return segments_; }
  // The values of a push (the sum of rows * cols).
  int64_t elements() const { return elements_; }
  // The warm-start bases of an edge: the sum of cols * rank.
  int64_t basis_floats() const { return basis_floats_; }
  // A message's size: exact for an edge's first push (`started` false).
  int64_t MessageFloats(bool started) const;

  // Sender. Writes the message for `x` and updates the edge's `reference` to
  // what the receiver will decode and its `basis` (the warm start). `seed`
  // seeds the Q columns that start at zero.
  void Encode(absl::Span<const float> x, bool started, uint64_t seed, absl::Span<float> reference,
              absl::Span<float> basis, absl::Span<float> message) const;
  // Receiver: the edge's `reference` becomes the decoded value.
  void Decode(absl::Span<const float> message, bool started, absl::Span<float> reference) const;

  // The push's step: y = x + consensus * (received - sent), in the codecs'
  // library (no fused multiply-add, as the GPU's LowRankPushMix).
  static void Mix(absl::Span<const float> x, absl::Span<const float> received, absl::Span<const float> sent,
                  float consensus, absl::Span<float> y);

  // The N(0, 1) values a warm start's zero columns take: one per entry of a
  // cols x rank matrix, from a generator seeded with `seed`, in one fixed
  // sequence (segment s of a push is seeded with seed + s). The GPU's
  // pushes take the same.
  static std::vector<float> SeedDraws(uint64_t seed, int64_t cols, int64_t rank);

 private:
  explicit LowRankPush(std::vector<PushSegment> segments);

  std::vector<PushSegment> segments_;
  int64_t elements_ = 0;
  int64_t basis_floats_ = 0;
};

}  // namespace nereid

#endif  // NEREID_COMPRESS_LOW_RANK_PUSH_H_
