#include "ops/low_rank_push_node.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace nereid {

absl::StatusOr<LowRankPushNode> LowRankPushNode::Make(const Node& node, const AttrMap& attrs) {
  LowRankPushNode n;
  n.group = attrs.at("group")->s();
  n.group_size = attrs.at("group_size")->i();
  n.bucket = static_cast<int>(attrs.at("bucket")->i());
  n.seed = static_cast<uint64_t>(attrs.at("seed")->i());
  n.consensus = attrs.at("consensus")->f();
  for (const int64_t o : attrs.at("offsets")->list().i()) n.offsets.push_back(o);
  if (n.offsets.empty()) return absl::InvalidArgumentError(absl::StrCat("'", node.name(), "': offsets is empty"));
  const auto& s = attrs.at("segments")->list().i();
  std::vector<PushSegment> segments;
  for (int i = 0; i + 2 < s.size(); i += 3) segments.push_back({s[i], s[i + 1], s[i + 2]});
  absl::StatusOr<LowRankPush> push = LowRankPush::Create(std::move(segments));
  if (!push.ok()) return absl::Status(push.status().code(), absl::StrCat("'", node.name(), "': ", push.status().message()));
  n.push = std::make_shared<const LowRankPush>(*std::move(push));
  return n;
}

LowRankPushNode::Edge LowRankPushNode::EdgeAt(int64_t step, int rank, int world) const {
  const int64_t n = world;
  const int64_t slot = step % slots();
  const int64_t offset = ((offsets[static_cast<size_t>(slot)] % n) + n) % n;
  return Edge{slot, static_cast<int>((rank + offset) % n), static_cast<int>((rank - offset + n) % n),
              seed * 1000003u + static_cast<uint64_t>(step) * 8191u + static_cast<uint64_t>(rank)};
}

absl::Status LowRankPushNode::CheckLaunch(bool training, bool has_queue) const {
  if (!training) {
    return absl::FailedPreconditionError(absl::StrCat("LowRankPush on group '", group, "' runs in training steps only"));
  }
  if (!has_queue && group_size != 1) {
    return absl::FailedPreconditionError(absl::StrCat("group '", group, "' has ", group_size,
                                                      " ranks but this worker has no communicator for it"));
  }
  if (has_queue && bucket < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LowRankPush on group '", group, "' has no place in the group's step order (was the plan edited by hand?)"));
  }
  return absl::OkStatus();
}

absl::Status LowRankPushNode::CheckWorld(int world) const {
  if (world == group_size) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the plan says the group has ", group_size, " ranks but its communicator has ", world));
}

}  // namespace nereid
