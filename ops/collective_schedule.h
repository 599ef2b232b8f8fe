#ifndef NEREID_OPS_COLLECTIVE_SCHEDULE_H_
#define NEREID_OPS_COLLECTIVE_SCHEDULE_H_

// The order in which a plan's collectives are issued on each process group.
//
// Each group's collective engine runs its collectives in one fixed order per
// step, the same on every member (schedulers/collective_engine.h). The data
// parallel pass numbers its own buckets on the world group; collectives on a
// named group (ops with the `collective` trait and a `group` attribute) are
// numbered here, after every pass of a pipeline: in the graph's deterministic
// topological order (`bucket`), and, for those evaluation runs (ancestors of
// the graph's logits and loss), in that order again (`eval_bucket`, -1 for
// the rest), since evaluation runs the forward part only. Send/Recv pairs
// (ops/point_to_point_ops.cc) are numbered the same way (`channel`, and
// `eval` where evaluation runs them).

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "graph/ir.h"

namespace nereid {

// The group a node's collective runs on: its `group` attribute ("": world).
std::string CollectiveGroup(const Node& node);
// Whether the node's op has the collective trait.
bool IsCollective(const Node& node);
// Whether the node's op talks to other ranks: a collective or a
// point-to-point transfer (OpDef::communicates).
bool Communicates(const Node& node);

// Numbers the collectives of every named group (see above). Idempotent.
absl::Status AssignCollectiveOrder(Graph& graph);

// A plan's process groups and collectives agree: every collective on a named
// group names a declared one; with the plan's `workers` known, each layout
// divides the workers and each group op's group_size is its group's size; and
// where buckets are numbered, each group's are 0..n-1 once each (so are its
// evaluation buckets). Errors name the node and the group. Graphs without
// groups pass.
absl::Status CheckCollectivePlan(const Graph& graph);

struct CollectiveCounts {
  int per_step = 0;        // a training step's collectives
  int per_evaluation = 0;  // an evaluation batch's
};
// By group name ("" is the world).
absl::flat_hash_map<std::string, CollectiveCounts> CollectivesByGroup(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_OPS_COLLECTIVE_SCHEDULE_H_
