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
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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

// Transfers placed on a device (place(comm=device)): a Send or Recv with a
// peer whose value's shape the plan knows whole, on a device (not the
// host). NCCL matches transfers by the order they are issued in, not by tag,
// so every rank issues its device transfers in one order, which every end
// computes alike: by (phase, channel, sending rank, receiving rank). Channels
// follow the plan's topological order, and a pass that numbers its own puts
// a transfer that waits on others of its step in a later phase (the
// parameter server's pulls). The ranks' orders are then parts of one order;
// where the data flow agrees with it, the earliest transfer not done has
// what it needs and heads both its ends' orders, so none waits for ever.
// They run on a communication stream of their own,
// through a world-sized communicator kept for them, as the collectives of a
// group named kTransferGroup (a name no declared group can take).
inline constexpr char kTransferGroup[] = "-transfers";
bool IsDeviceTransfer(const Node& node);
// Whether a Send or Recv's value has a shape the plan knows whole (it then
// travels without its dims, and may be placed on a device).
bool IsPlannedTransfer(const Node& node);
// A rank's device transfers' places in its issue order, by node id: for
// training steps, and for evaluation batches (-1: evaluation does not run it).
struct TransferBucket {
  int step = 0;
  int evaluation = -1;
};
struct TransferBuckets {
  absl::flat_hash_map<int, TransferBucket> of_node;
  int per_step = 0, per_evaluation = 0;
};
TransferBuckets DeviceTransferBuckets(const Graph& graph, int rank);
// Checks every rank's order of device transfers (parts[r]: rank r's graph)
// before anything runs: on each rank a transfer comes after the transfers
// its value depends on (within the rank: dependencies through the host's
// transfers or collectives are the plan's channel numbering's to keep),
// every rank has some if any has (their communicator spans the world), a
// transfer to the rank itself is not on cuda, and the two ends of every
// transfer agree on its place (played out: the transfer at the head of both
// ends' orders goes, until none is left). Errors name the ranks and
// transfers.
absl::Status CheckDeviceTransferOrder(const std::vector<const Graph*>& parts);

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

// Groups ("" for the world) with collectives on a device and on the host
// (place(comm=device) with fallback=host or host_ops: a codec without GPU
// kernels beside the GPU's dense buckets). On cuda NCCL runs the device's
// share and the host's communicator the rest; the sim splits alike, so the
// split runs where no GPU is. Each share is issued by engines of its own in
// the group's order: a share's collectives are numbered again, by `bucket`,
// and by `eval_bucket` for those evaluation runs. The host's share of group
// g runs as a group of its own named HostShare(g) ("-host" for the world,
// "-host-g" for g), a name no declared group can take.
std::string HostShare(const std::string& group);
// Whether the node is placed on a device (not the host).
bool OnDevice(const Node& node);
struct SplitGroups {
  absl::flat_hash_set<std::string> groups;           // the groups split so
  absl::flat_hash_map<int, TransferBucket> of_node;  // by node id: its place in its share's order
  absl::flat_hash_map<std::string, CollectiveCounts> counts;  // by share: g (the device's), HostShare(g)
};
SplitGroups SplitAcrossSides(const Graph& graph);

}  // namespace nereid

#endif  // NEREID_OPS_COLLECTIVE_SCHEDULE_H_
