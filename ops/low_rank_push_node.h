#ifndef NEREID_OPS_LOW_RANK_PUSH_NODE_H_
#define NEREID_OPS_LOW_RANK_PUSH_NODE_H_

// A LowRankPush node (ops/low_rank_push_ops.cc) as its CPU and GPU kernels
// both read it: its group, its turn among the group's collectives, its
// codes (compress/low_rank_push.h) and each step's edge. State layout:
// inputs and outputs 1..4 are the edges' sent and received references
// (slots x elements), their warm starts (slots x basis floats) and which
// edges have started (2 x slots: out-edges, then in-edges).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compress/low_rank_push.h"
#include "ops/kernel.h"

namespace nereid {

struct LowRankPushNode {
  std::string group;
  int64_t group_size = 1;
  int bucket = -1;  // the node's turn among the group's collectives
  uint64_t seed = 1;
  float consensus = 1.0f;
  std::vector<int64_t> offsets;  // one slot each
  std::shared_ptr<const LowRankPush> push;

  // An error names the node.
  static absl::StatusOr<LowRankPushNode> Make(const Node& node, const AttrMap& attrs);

  int64_t slots() const { return static_cast<int64_t>(offsets.size()); }

  // The edges a rank uses at a step, and the seed of its warm starts.
  struct Edge {
    int64_t slot;
    int to, from;
    uint64_t seed;
  };
  Edge EdgeAt(int64_t step, int rank, int world) const;

  // Why a launch cannot run here, if it cannot: an evaluation step, a group
  // of more than one without a communicator, no turn in the group's order.
  absl::Status CheckLaunch(bool training, bool has_queue) const;
  // The group's communicator against the plan's size.
  absl::Status CheckWorld(int world) const;
};

}  // namespace nereid

#endif  // NEREID_OPS_LOW_RANK_PUSH_NODE_H_
