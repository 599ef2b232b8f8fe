#include "ops/collective_schedule.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "graph/process_groups.h"
#include "ops/op_registry.h"
#include "ops/topo_order.h"

namespace nereid {
namespace {

// Nodes evaluation runs: ancestors of the graph's logits and loss, not
// through a Parameter's `next` input (evaluation reads current values).
absl::flat_hash_set<const Node*> EvaluatedNodes(const std::vector<Node*>& order, const Graph& graph) {
  absl::flat_hash_set<const Node*> needed;
  for (const char* attr : {"logits", "loss"}) {
    if (Node* n = graph.FindNode(GraphAttr(graph, attr))) needed.insert(n);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node* n = *it;
    if (!needed.contains(n) || n->op() == "Parameter") continue;
    for (int i = 0; i < n->num_inputs(); ++i) needed.insert(n->input_edge(i)->src);
    for (const Edge* e : n->control_inputs()) needed.insert(e->src);
  }
  return needed;
}

}  // namespace

std::string CollectiveGroup(const Node& node) { return NodeAttrString(node, "group"); }

bool IsCollective(const Node& node) {
  const OpDef* def = OpRegistry::Global().Find(node.op());
  return def != nullptr && def->collective;
}

bool Communicates(const Node& node) {
  const OpDef* def = OpRegistry::Global().Find(node.op());
  return def != nullptr && def->communicates;
}

bool IsPlannedTransfer(const Node& node) {
  if (node.op() != "Send" && node.op() != "Recv") return false;
  return !node.outputs().empty() && !node.outputs()[0].shape.HasUnknownDim();
}

bool IsDeviceTransfer(const Node& node) {
  return IsPlannedTransfer(node) && NodeAttrInt(node, "peer", -1) >= 0 && OnDevice(node);
}

namespace {

// A device transfer as both its ends name it; the rank's order sorts by it.
struct TransferKey {
  int64_t phase, channel, sender, receiver;
  bool evaluated;  // evaluation runs it: both ends must agree, or evaluation waits
  bool operator==(const TransferKey& o) const {
    return phase == o.phase && channel == o.channel && sender == o.sender && receiver == o.receiver &&
           evaluated == o.evaluated;
  }
};

TransferKey KeyOf(const Node& n, int rank) {
  const int64_t peer = NodeAttrInt(n, "peer", -1);
  const bool send = n.op() == "Send";
  return {NodeAttrInt(n, "phase", 0), NodeAttrInt(n, "channel", -1), send ? rank : peer, send ? peer : rank,
          NodeAttrBool(n, "eval", false)};
}

}  // namespace

TransferBuckets DeviceTransferBuckets(const Graph& graph, int rank) {
  // By key, then a transfer to the rank itself sends before it receives;
  // node id.
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, int>> order;
  for (const Node* n : graph.nodes()) {
    if (!IsDeviceTransfer(*n)) continue;
    const TransferKey k = KeyOf(*n, rank);
    order.emplace_back(k.phase, k.channel, k.sender, k.receiver, n->op() != "Send", k.evaluated, n->id());
  }
  std::sort(order.begin(), order.end());
  TransferBuckets buckets;
  for (const auto& [phase, channel, sender, receiver, receives, evaluated, id] : order) {
    TransferBucket& b = buckets.of_node[id];
    b.step = buckets.per_step++;
    if (evaluated) b.evaluation = buckets.per_evaluation++;
  }
  return buckets;
}

namespace {

std::string Describe(const TransferKey& k) {
  return absl::StrCat("rank ", k.sender, " -> rank ", k.receiver, " on channel ", k.channel, " (phase ", k.phase,
                      k.evaluated ? ", evaluated" : "", ")");
}

// Rank `rank`'s device transfers in its issue order; an error names one that
// comes before a transfer its value depends on.
absl::StatusOr<std::vector<TransferKey>> OrderOfRank(const Graph& graph, int rank) {
  const TransferBuckets buckets = DeviceTransferBuckets(graph, rank);
  std::vector<TransferKey> order(buckets.per_step);
  ASSIGN_OR_RETURN(std::vector<Node*> topo, TopologicalOrder(graph));
  // The latest bucket among the transfers each node's value depends on.
  absl::flat_hash_map<const Node*, int> latest;
  for (const Node* n : topo) {
    int before = -1;
    auto absorb = [&](const Edge* e) {
      if (e == nullptr) return;
      auto it = latest.find(e->src);
      if (it != latest.end()) before = std::max(before, it->second);
    };
    // A Parameter's inputs are its next step's value: its own is the last step's.
    if (n->op() != "Parameter") {
      for (int i = 0; i < n->num_inputs(); ++i) absorb(n->input_edge(i));
      for (const Edge* e : n->control_inputs()) absorb(e);
    }
    auto bucket = buckets.of_node.find(n->id());
    if (bucket != buckets.of_node.end()) {
      const int b = bucket->second.step;
      order[b] = KeyOf(*n, rank);
      if (order[b].sender == order[b].receiver && absl::StartsWith(n->def().device(), "cuda:")) {
        return absl::UnimplementedError(absl::StrCat(
            "rank ", rank, ": '", n->name(), "' is a transfer to the rank itself placed on cuda, which is not built "
            "(NCCL meets it only inside one group call with its receive); the colocated servers exchange through "
            "collectives instead (parameter_server(colocated=true,exchange=collective))"));
      }
      if (before >= b) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank, ": the device transfer '", n->name(), "' (", Describe(order[b]),
            ") is issued before a transfer its value depends on; give the later one a later phase or channel"));
      }
      before = b;
    }
    if (before >= 0) latest[n] = before;
  }
  return order;
}

}  // namespace

absl::Status CheckDeviceTransferOrder(const std::vector<const Graph*>& parts) {
  const int world = static_cast<int>(parts.size());
  std::vector<std::vector<TransferKey>> orders;
  for (int r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(std::vector<TransferKey> order, OrderOfRank(*parts[r], r));
    orders.push_back(std::move(order));
  }
  // Their communicator spans the world, and joining it is a rendezvous of
  // every rank: each must have some.
  for (int r = 0; r < world; ++r) {
    if (!orders[r].empty()) continue;
    for (int q = 0; q < world; ++q) {
      if (orders[q].empty()) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", q, " has transfers placed on a device and rank ", r, " has none: the device transfers' "
          "communicator spans every rank (a server without parameters? use fewer servers, or place(comm=host))"));
    }
  }
  // Played out: a transfer goes when it heads both its ends' orders (a
  // transfer to the rank itself: its two ends head that order together).
  std::vector<size_t> next(world, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < world; ++r) {
      if (next[r] >= orders[r].size()) continue;
      const TransferKey& k = orders[r][next[r]];
      const int64_t peer = k.sender == r ? k.receiver : k.sender;
      if (peer < 0 || peer >= world) continue;  // CheckPartsAcrossRanks names a stray peer
      if (peer == r) {
        if (next[r] + 1 < orders[r].size() && orders[r][next[r] + 1] == k) {
          next[r] += 2;
          moved = true;
        }
        continue;
      }
      if (next[peer] < orders[peer].size() && orders[peer][next[peer]] == k) {
        ++next[r];
        ++next[peer];
        moved = true;
      }
    }
  }
  for (int r = 0; r < world; ++r) {
    if (next[r] >= orders[r].size()) continue;
    const TransferKey& k = orders[r][next[r]];
    const int64_t peer = k.sender == r ? k.receiver : k.sender;
    std::string other = "has no transfers left";
    if (peer >= 0 && peer < world && next[peer] < orders[peer].size()) {
      other = absl::StrCat("is at ", Describe(orders[peer][next[peer]]));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the device transfers would wait for ever: rank ", r, "'s next is ", Describe(k), " while rank ", peer, " ",
        other, " (NCCL matches transfers by issue order: every rank issues its device transfers by phase, "
        "channel, sender, receiver)"));
  }
  return absl::OkStatus();
}

absl::Status AssignCollectiveOrder(Graph& graph) {
  ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
  absl::flat_hash_set<const Node*> evaluated = EvaluatedNodes(order, graph);
  absl::flat_hash_map<std::string, int> next, next_eval;
  // Ends a pass wrote with their peer (the parameter server's) keep their
  // channels; pairs are numbered after them.
  int next_channel = 0;
  for (const Node* n : order) {
    if ((n->op() == "Send" || n->op() == "Recv") && n->def().attr().contains("peer")) {
      next_channel = std::max<int>(next_channel, static_cast<int>(NodeAttrInt(*n, "channel", -1)) + 1);
    }
  }
  for (Node* n : order) {
    // A Send/Recv pair of the whole plan (the Recv reads its Send).
    if (n->op() == "Recv" && n->num_inputs() == 1 && n->input_edge(0)->src->op() == "Send") {
      Node* send = n->input_edge(0)->src;
      for (Node* end : {send, n}) {
        auto& attrs = *end->mutable_def()->mutable_attr();
        attrs["channel"] = IntAttr(next_channel);
        attrs["eval"] = BoolAttr(evaluated.contains(n));
      }
      ++next_channel;
      continue;
    }
    if (!IsCollective(*n)) continue;
    std::string group = CollectiveGroup(*n);
    if (group.empty()) continue;  // the world's buckets are the data-parallel pass's
    auto& attrs = *n->mutable_def()->mutable_attr();
    attrs["bucket"] = IntAttr(next[group]++);
    if (OpRegistry::Global().Find(n->op())->FindAttr("eval_bucket") != nullptr) {
      attrs["eval_bucket"] = IntAttr(evaluated.contains(n) ? next_eval[group]++ : -1);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCollectivePlan(const Graph& graph) {
  ASSIGN_OR_RETURN(std::vector<GroupDecl> declared, DeclaredGroups(graph));
  const int64_t workers = graph.header().records().workers();
  absl::flat_hash_map<std::string, int> size;  // at the plan's workers (0: unknown)
  for (const GroupDecl& g : declared) {
    size[g.name] = 0;
    if (workers < 1) continue;
    absl::Status fits = MembershipOf(g, g.first, static_cast<int>(workers)).status();
    if (!fits.ok()) return fits;
    size[g.name] = GroupSize(g, static_cast<int>(workers));
  }
  // By group: the nodes at each bucket, and at each evaluation bucket.
  absl::flat_hash_map<std::string, std::map<int64_t, std::vector<const Node*>>> buckets, eval_buckets;
  for (Node* n : graph.nodes()) {
    if (!IsCollective(*n)) continue;
    const std::string group = CollectiveGroup(*n);
    if (group.empty()) continue;
    auto it = size.find(group);
    if (it == size.end()) {
      return NodeError(graph, *n, absl::StrCat("runs on group '", group, "', which the plan's groups do not declare"));
    }
    const int64_t group_size = NodeAttrInt(*n, "group_size", 0);
    if (it->second > 0 && group_size > 0 && group_size != it->second) {
      return NodeError(graph, *n, absl::StrCat("says group '", group, "' has ", group_size, " ranks, but at the plan's ",
                                               workers, " workers it has ", it->second));
    }
    buckets[group][NodeAttrInt(*n, "bucket", -1)].push_back(n);
    const int64_t eval = NodeAttrInt(*n, "eval_bucket", -1);
    if (eval >= 0) eval_buckets[group][eval].push_back(n);
  }
  for (auto* numbering : {&buckets, &eval_buckets}) {
    for (const auto& [group, by_bucket] : *numbering) {
      if (by_bucket.count(-1) > 0 && by_bucket.size() == 1) continue;  // not numbered yet
      int64_t expected = 0;
      for (const auto& [bucket, nodes] : by_bucket) {
        if (bucket != expected || nodes.size() != 1) {
          return NodeError(graph, *nodes.front(),
                           absl::StrCat("group '", group, "': ", numbering == &buckets ? "bucket " : "eval_bucket ",
                                        bucket, nodes.size() > 1 ? " is shared with another collective"
                                                                 : absl::StrCat(" where ", expected, " is missing"),
                                        ": the ranks could pair different collectives (re-plan the model)"));
        }
        ++expected;
      }
    }
  }
  return absl::OkStatus();
}

absl::flat_hash_map<std::string, CollectiveCounts> CollectivesByGroup(const Graph& graph) {
  absl::flat_hash_map<std::string, CollectiveCounts> counts;
  for (Node* n : graph.nodes()) {
    if (!IsCollective(*n)) continue;
    CollectiveCounts& c = counts[CollectiveGroup(*n)];
    ++c.per_step;
    if (NodeAttrInt(*n, "eval_bucket", -1) >= 0) ++c.per_evaluation;
  }
  return counts;
}

// Group names take letters, digits, '_', '.' and '-' (the rendezvous keys).
std::string HostShare(const std::string& group) { return absl::StrCat("-host", group.empty() ? "" : "-", group); }

bool OnDevice(const Node& node) {
  const std::string& device = node.def().device();
  return !device.empty() && !absl::StartsWith(device, "cpu:");
}

SplitGroups SplitAcrossSides(const Graph& graph) {
  absl::flat_hash_map<std::string, std::pair<bool, bool>> sides;  // by group: (some on a device, some on the host)
  for (const Node* n : graph.nodes()) {
    if (!IsCollective(*n)) continue;
    auto& [gpu, host] = sides[CollectiveGroup(*n)];
    (OnDevice(*n) ? gpu : host) = true;
  }
  SplitGroups split;
  for (const auto& [group, on] : sides) {
    if (on.first && on.second) split.groups.insert(group);
  }
  if (split.groups.empty()) return split;
  // By share: (bucket, eval_bucket, node id) of its collectives.
  std::map<std::string, std::vector<std::tuple<int64_t, int64_t, int>>> shares;
  for (const Node* n : graph.nodes()) {
    if (!IsCollective(*n) || !split.groups.contains(CollectiveGroup(*n))) continue;
    const std::string share = OnDevice(*n) ? CollectiveGroup(*n) : HostShare(CollectiveGroup(*n));
    shares[share].emplace_back(NodeAttrInt(*n, "bucket", 0), NodeAttrInt(*n, "eval_bucket", -1), n->id());
  }
  for (auto& [share, members] : shares) {
    CollectiveCounts& counts = split.counts[share];
    std::sort(members.begin(), members.end());
    for (const auto& [bucket, eval_bucket, id] : members) split.of_node[id].step = counts.per_step++;
    std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
    });
    for (const auto& [bucket, eval_bucket, id] : members) {
      if (eval_bucket >= 0) split.of_node[id].evaluation = counts.per_evaluation++;
    }
  }
  return split;
}

}  // namespace nereid
