// gossip: Stochastic Gradient Push (Assran et al., 2019). Every rank keeps
// its own parameters; after each local optimizer step it keeps 1/(p+1) of
// every updated value and pushes 1/(p+1) to each of its p out-neighbours of
// the step (peers=p, default 1), adding what its in-neighbours pushed
// (push-sum with uniform mixing). The push is a GroupSendRecv on a group of all ranks (one
// per bucket of values, bucket_kb, and peer), whose offsets change with the step: SGP's time-varying directed exponential
// graph (at step t rank i sends to i + 2^(t mod log2 n)), its linear graph
// (i + 1 + (t mod (n-1))) or a ring (i + 1).
// On the complete graph every rank sends 1/n to every other (a
// GroupAllReduce scaled by 1/n): one step gives the allreduce average.
//
// Push-sum carries a weight beside the parameters (state "gossip/weight",
// per rank, checkpointed): w' = (w + w_in) / 2. Without overlap every rank
// receives exactly one message per step in the topologies built here, so
// every weight stays 1 and the de-biased model x / w is the parameters
// themselves.
//
// Overlap SGP (overlap=tau): what a rank receives at step t is mixed in at
// step t+tau, through a delay line of zero-started per-rank state (as
// pipeline's delayed gradients), so the push of step t is on the wire while
// steps t+1..t+tau compute; the training loop's frontier bound becomes
// tau+1 steps in flight, which the progress tracker enforces. Mass is
// conserved counting what is in flight, but a rank's weight moves from 1
// (its first tau steps receive nothing), so every reader of a parameter but
// its optimizer update reads the de-biased x / w: the forward and backward
// passes run at x / w and the update applies that gradient to x, as SGP does.
//
// Replaces data_parallel (it provides the gradient communication): the
// ranks' parameters, optimizer state included, differ between ranks (per
// rank), and their average converges to the allreduce model's.

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/tensor_shape.h"
#include "graph/process_groups.h"
#include "ops/gradient_builder.h"
#include "passes/gossip_topology.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

// The out-neighbour offsets the steps cycle through (empty: all to all).
absl::StatusOr<std::vector<int64_t>> TopologyOffsets(const std::string& name, int64_t world) {
  const GossipTopology* topology = GossipTopologyRegistry::Global().Find(name);
  if (topology == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("gossip: topology '", name, "' is not one of: ",
                                                   absl::StrJoin(GossipTopologyRegistry::Global().Names(), ", ")));
  }
  if (topology->all_to_all) return std::vector<int64_t>{};
  std::vector<int64_t> offsets = topology->offsets(world);
  for (int64_t o : offsets) {
    if (o <= 0 || o >= world) {
      return absl::InternalError(absl::StrCat("gossip: topology ", name, " gave offset ", o, " for ", world, " ranks"));
    }
  }
  if (offsets.empty()) return absl::InternalError(absl::StrCat("gossip: topology ", name, " gave no offsets"));
  return offsets;
}

// Every reader of `parameter` but its optimizer `update` reads x / w.
absl::Status ReadDebiased(Graph& graph, Node* parameter, const Node* update, Node* weight) {
  ASSIGN_OR_RETURN(Node * debiased, AddOpNode(&graph, absl::StrCat(parameter->name(), "/gossip/debiased"), "Div",
                                              {NodeOut{parameter, 0}, NodeOut{weight, 0}}));
  std::vector<std::pair<Node*, int>> readers;
  for (const Edge* e : parameter->out_edges()) {
    if (e->dst != update && e->dst != debiased && !e->IsControl()) readers.emplace_back(e->dst, e->dst_port);
  }
  for (auto& [reader, port] : readers) RETURN_IF_ERROR(graph.ReplaceInput(reader, port, debiased, 0));
  return absl::OkStatus();
}

struct PushedValue {
  std::string name;
  NodeOut value;
  std::vector<int64_t> dims;
};

using PeerAttrs = std::function<std::vector<std::pair<std::string, AttrValue>>(int64_t)>;

// Pushes every value to each peer, packed into buckets of consecutive values
// of at most `bucket_bytes` (one message per bucket and peer instead of one
// per value: each message costs a latency). A value alone in its bucket is
// pushed as it is; a bucket of several is flattened and concatenated, pushed,
// and sliced back into each value's shape (copies only: the arithmetic is
// the unbucketed one's). Returns, per value, what arrived from each peer.
absl::StatusOr<std::vector<std::vector<NodeOut>>> PushInBuckets(Graph& graph, const std::vector<PushedValue>& values,
                                                                int64_t bucket_bytes, int64_t peers,
                                                                const PeerAttrs& peer_push, int* buckets) {
  std::vector<std::vector<NodeOut>> arrived(values.size());
  auto elements = [&](size_t i) { return TensorShape(values[i].dims).KnownElements(); };
  for (size_t begin = 0; begin < values.size(); ++*buckets) {
    size_t end = begin + 1;
    int64_t bytes = elements(begin) * 4;
    while (end < values.size() && bytes + elements(end) * 4 <= bucket_bytes) bytes += elements(end++) * 4;
    auto suffix = [](int64_t j) { return j == 0 ? std::string() : absl::StrCat("_", j); };
    if (end == begin + 1) {
      for (int64_t j = 0; j < peers; ++j) {
        ASSIGN_OR_RETURN(Node * in, AddOpNode(&graph, absl::StrCat(values[begin].name, "/gossip/push", suffix(j)),
                                              "GroupSendRecv", {values[begin].value}, peer_push(j)));
        arrived[begin].push_back(NodeOut{in, 0});
      }
      begin = end;
      continue;
    }
    const std::string bucket = absl::StrCat("gossip/bucket_", *buckets);
    std::vector<NodeOut> flat;
    for (size_t i = begin; i < end; ++i) {
      ASSIGN_OR_RETURN(Node * f, AddOpNode(&graph, absl::StrCat(values[i].name, "/gossip/flat"), "Reshape",
                                           {values[i].value}, {{"shape", IntListAttr({elements(i)})}}));
      flat.push_back(NodeOut{f, 0});
    }
    ASSIGN_OR_RETURN(Node * pack, AddOpNode(&graph, bucket + "/pack", "Concat", flat, {{"axis", IntAttr(0)}}));
    for (int64_t j = 0; j < peers; ++j) {
      ASSIGN_OR_RETURN(Node * in, AddOpNode(&graph, absl::StrCat(bucket, "/push", suffix(j)), "GroupSendRecv",
                                            {NodeOut{pack, 0}}, peer_push(j)));
      int64_t offset = 0;
      for (size_t i = begin; i < end; ++i) {
        const std::string name = absl::StrCat(values[i].name, "/gossip/unpacked", suffix(j));
        ASSIGN_OR_RETURN(Node * piece, AddOpNode(&graph, name, "Slice", {NodeOut{in, 0}},
                                                 {{"axis", IntAttr(0)}, {"begin", IntAttr(offset)},
                                                  {"size", IntAttr(elements(i))}}));
        ASSIGN_OR_RETURN(Node * shaped, AddOpNode(&graph, absl::StrCat(name, "/shaped"), "Reshape", {NodeOut{piece, 0}},
                                                  {{"shape", IntListAttr(values[i].dims)}}));
        arrived[i].push_back(NodeOut{shaped, 0});
        offset += elements(i);
      }
    }
    begin = end;
  }
  return arrived;
}

// The gossip options, checked against the plan's world.
struct GossipOptions {
  std::string topology;
  std::vector<int64_t> offsets;  // the out-neighbour offsets the steps cycle through (empty: all to all)
  int64_t world = 0;
  int64_t overlap = 0;
  int64_t peers = 0;
  int64_t bucket_kb = 0;
  bool complete = false;  // every rank sends 1/n to every other (a GroupAllReduce)
};

// What the helpers of one Run share: the options, the push-sum weight and
// mixing share they wire in, and the delay lines they make (for the record).
struct GossipRun {
  GossipOptions options;
  Node* weight = nullptr;  // state "gossip/weight", per rank, starting at 1
  Node* mix = nullptr;     // the Const share: 1/(peers+1), or 1/n when complete
  std::vector<std::pair<std::string, AttrValue>> group;  // the gossip group's attributes
  std::vector<std::string> in_flight, weight_in_flight;  // the delay lines' states, for the plan's record
};

// Reads the options and checks them against the topology and the world,
// before anything is added to the graph.
absl::StatusOr<GossipOptions> ParseGossipOptions(const PassContext& context) {
  const PassOptions& o = context.options;
  GossipOptions options;
  options.world = context.target.workers;
  const int64_t world = options.world;
  if (world < 2) {
    return absl::FailedPreconditionError(
        "gossip: the plan needs at least 2 workers (plan with --workers N, run with --workers N)");
  }
  options.topology = o.GetString("topology");
  ASSIGN_OR_RETURN(options.offsets, TopologyOffsets(options.topology, world));
  const std::vector<int64_t>& offsets = options.offsets;
  options.complete = offsets.empty();
  options.overlap = o.GetInt("overlap");
  const int64_t overlap = options.overlap;
  options.bucket_kb = o.GetInt("bucket_kb");
  if (options.bucket_kb < 0 || options.bucket_kb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("gossip: bucket_kb=", options.bucket_kb,
                                                   " must be in [0, 2^30]"));
  }
  if (overlap < 0 || overlap > 16) {
    return absl::InvalidArgumentError(absl::StrCat("gossip: overlap=", overlap, " must be in [0, 16]"));
  }
  if (overlap > 0 && offsets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("gossip: overlap=", overlap, " delays pushes; topology ",
                                                   options.topology,
                                                   " is an allreduce (use exponential or ring)"));
  }
  options.peers = o.GetInt("peers");
  const int64_t peers = options.peers;
  if (peers < 1 || (offsets.empty() && peers != 1) || (!offsets.empty() && peers > static_cast<int64_t>(offsets.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gossip: peers=", peers, " out-neighbours per step needs as many distinct offsets; topology ",
        options.topology, " on ", world, " ranks has ", offsets.empty() ? world - 1 : static_cast<int64_t>(offsets.size()),
        offsets.empty() ? " (every rank already; leave peers at 1)" : " (1 <= peers <= that)"));
  }
  return options;
}

// Declares the group of all ranks the pushes go over; a plan that has it
// already was gossiped before, and is refused.
absl::Status DeclareGossipGroup(Graph& graph, int64_t world) {
  ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(graph));
  for (const GroupDecl& g : groups) {
    if (g.name == kGossipGroup) return absl::FailedPreconditionError("gossip: applied twice");
  }
  groups.push_back(GroupDecl{kGossipGroup, GroupLayout::kBlocks, static_cast<int>(world)});
  DeclareGroups(graph, groups);
  return absl::OkStatus();
}

// Adds the push-sum weight (per rank, starting at 1) and the mixing share,
// and sets the group attributes every push carries.
absl::Status AddMixingState(Graph& graph, GossipRun& run) {
  const GossipOptions& o = run.options;
  ASSIGN_OR_RETURN(run.weight, AddState(graph, kPushSumWeightState, {1}, /*per_rank=*/true));
  (*run.weight->mutable_def()->mutable_attr())["init"].mutable_tensor()->mutable_init()->set_kind("ones");
  const float share = 1.0f / static_cast<float>(o.complete ? o.world : o.peers + 1);
  ASSIGN_OR_RETURN(run.mix,
                   AddOpNode(&graph, "gossip/mixing_weight", "Const", {}, {{"value", ScalarConstValue(share)}}));
  run.group = {{"group", StringAttr(kGossipGroup)}, {"group_size", IntAttr(o.world)}};
  return absl::OkStatus();
}

// Peer j's push attributes: its shift cycles through the offsets j places
// ahead, so at every step the peers are distinct ranks and every rank hears
// from `peers`.
std::vector<std::pair<std::string, AttrValue>> PeerPushAttrs(const GossipRun& run, int64_t j) {
  const std::vector<int64_t>& offsets = run.options.offsets;
  std::vector<int64_t> rotated(offsets.size());
  for (size_t k = 0; k < offsets.size(); ++k) rotated[k] = offsets[(k + j) % offsets.size()];
  std::vector<std::pair<std::string, AttrValue>> attrs = run.group;
  attrs.emplace_back("offsets", IntListAttr(rotated));
  return attrs;
}

// Overlap's mix, x share + (the shares that arrived `overlap` steps ago): the
// shares are scaled as they arrive, so the delay line holds the mass in flight.
absl::StatusOr<NodeOut> DelayedMix(Graph& graph, GossipRun& run, const PushedValue& pushed, NodeOut incoming) {
  const std::string& name = pushed.name;
  ASSIGN_OR_RETURN(Node * shares, AddOpNode(&graph, absl::StrCat(name, "/gossip/arrived"), "Mul",
                                            {incoming, NodeOut{run.mix, 0}}));
  incoming = NodeOut{shares, 0};
  for (int64_t k = 1; k <= run.options.overlap; ++k) {
    ASSIGN_OR_RETURN(Node * delayed, AddState(graph, absl::StrCat(name, "/gossip/in_flight_", k), pushed.dims,
                                              /*per_rank=*/true));
    (name == kPushSumWeightState ? run.weight_in_flight : run.in_flight).push_back(delayed->name());
    RETURN_IF_ERROR(CloseLoop(graph, delayed, incoming));
    incoming = NodeOut{delayed, 0};
  }
  ASSIGN_OR_RETURN(Node * kept, AddOpNode(&graph, absl::StrCat(name, "/gossip/kept"), "Mul",
                                          {pushed.value, NodeOut{run.mix, 0}}));
  ASSIGN_OR_RETURN(Node * out, AddOpNode(&graph, absl::StrCat(name, "/gossip/mixed"), "Add",
                                         {NodeOut{kept, 0}, incoming}));
  return NodeOut{out, 0};
}

// Keep a share, push one share to each peer, add what arrives:
// (x + sum of x_in) / (peers + 1); complete: the sum of every rank's
// share, sum / n. `arrived`: what each peer pushed (PushInBuckets);
// with overlap it is added `overlap` steps later.
absl::StatusOr<NodeOut> Mixed(Graph& graph, GossipRun& run, const PushedValue& pushed,
                              const std::vector<NodeOut>& arrived) {
  const std::string& name = pushed.name;
  const bool complete = run.options.complete;
  const int64_t overlap = run.options.overlap;
  NodeOut sum_out = pushed.value;
  if (complete) {
    ASSIGN_OR_RETURN(Node * all, AddOpNode(&graph, absl::StrCat(name, "/gossip/push"), "GroupAllReduce",
                                           {pushed.value}, run.group));
    sum_out = NodeOut{all, 0};
  }
  // Without overlap: ((x + in_0) + in_1) ...; with: x + delayed(in_0 + in_1 ...).
  NodeOut incoming = pushed.value;
  for (int64_t j = 0; !complete && j < run.options.peers; ++j) {
    const std::string suffix = j == 0 ? "" : absl::StrCat("_", j);
    const NodeOut in = arrived[static_cast<size_t>(j)];
    if (overlap > 0 && j == 0) {
      incoming = in;
      continue;
    }
    NodeOut& into = overlap > 0 ? incoming : sum_out;
    ASSIGN_OR_RETURN(Node * sum, AddOpNode(&graph, absl::StrCat(name, "/gossip/sum", suffix), "Add", {into, in}));
    into = NodeOut{sum, 0};
  }
  if (overlap > 0) return DelayedMix(graph, run, pushed, incoming);
  ASSIGN_OR_RETURN(Node * out, AddOpNode(&graph, absl::StrCat(name, "/gossip/mixed"), "Mul",
                                         {sum_out, NodeOut{run.mix, 0}}));
  return NodeOut{out, 0};
}

// The values pushed: every trained parameter's update, then the weight; with
// overlap, every other reader of a parameter is moved to its de-biased x / w.
absl::StatusOr<std::vector<PushedValue>> PushedValues(Graph& graph, const GossipRun& run,
                                                      const std::vector<std::pair<Node*, Node*>>& carried) {
  std::vector<PushedValue> pushed;
  for (const auto& [parameter, feedback] : carried) {
    const Edge* in = feedback->input_edge(0);
    if (run.options.overlap > 0) RETURN_IF_ERROR(ReadDebiased(graph, parameter, in->src, run.weight));
    pushed.push_back({parameter->name(), NodeOut{in->src, in->src_port}, parameter->outputs()[0].shape.dims()});
  }
  pushed.push_back({kPushSumWeightState, NodeOut{run.weight, 0}, {1}});
  return pushed;
}

// Pushes the values to the peers (complete: the allreduce in Mixed is the
// push), mixes each and feeds the result back: a parameter's through its
// Feedback, the weight's through a new loop. Returns the buckets per peer.
absl::StatusOr<int> PushAndMix(Graph& graph, GossipRun& run, const std::vector<std::pair<Node*, Node*>>& carried,
                               const std::vector<PushedValue>& pushed) {
  std::vector<std::vector<NodeOut>> arrived(pushed.size());
  int buckets = 0;
  if (!run.options.complete) {
    const PeerAttrs peer_push = [&run](int64_t j) { return PeerPushAttrs(run, j); };
    ASSIGN_OR_RETURN(arrived, PushInBuckets(graph, pushed, run.options.bucket_kb * 1024, run.options.peers,
                                            peer_push, &buckets));
  }
  for (size_t i = 0; i < pushed.size(); ++i) {
    ASSIGN_OR_RETURN(NodeOut next, Mixed(graph, run, pushed[i], arrived[i]));
    if (i + 1 == pushed.size()) {
      RETURN_IF_ERROR(CloseLoop(graph, run.weight, next));
    } else {
      RETURN_IF_ERROR(graph.ReplaceInput(carried[i].second, 0, next.node, next.port));
    }
  }
  return buckets;
}

// Writes the plan's gossip record (the trainer's reports and checkpoints read
// it), bounds the steps in flight when pushes are delayed, and logs the mix.
void RecordGossip(Graph& graph, const GossipRun& run, size_t pushed_values, int mixed_values, int buckets,
                  PassLog* log) {
  const GossipOptions& o = run.options;
  const int64_t overlap = o.overlap;
  PlanRecords::Gossip& record = *graph.mutable_header()->mutable_records()->mutable_gossip();
  record.set_topology(o.topology);
  record.set_weight_state(run.weight->name());
  record.set_overlap(static_cast<int32_t>(overlap));
  for (const std::string& state : run.in_flight) record.add_in_flight_state(state);
  for (const std::string& state : run.weight_in_flight) record.add_weight_in_flight_state(state);
  if (overlap > 0) {
    // A bound set before (pipeline's width) stays when it is the larger.
    LoopScope* loop = TrainLoop(graph);
    loop->set_max_in_flight(std::max(loop->max_in_flight(), static_cast<int32_t>(overlap + 1)));
    log->notes.push_back(absl::StrCat("overlap ", overlap, ": pushes mixed in ", overlap, " step",
                                      overlap == 1 ? "" : "s", " later, ", overlap + 1,
                                      " steps in flight; the model read is x / gossip/weight"));
  }
  if (!o.complete) {
    log->notes.push_back(absl::StrCat(pushed_values, " values pushed in ", buckets, " message", buckets == 1 ? "" : "s",
                                      " per peer and step (bucket_kb=", o.bucket_kb, ")"));
  }
  log->notes.push_back(absl::StrCat(mixed_values, " values mixed per step with ", o.complete ? o.world - 1 : o.peers,
                                    " peer(s) (", o.topology,
                                    o.complete ? ": every rank" : absl::StrCat(": offsets ", absl::StrJoin(o.offsets, ",")),
                                    "), push-sum weight gossip/weight"));
}

class GossipPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    GossipRun run;
    ASSIGN_OR_RETURN(run.options, ParseGossipOptions(context));
    // The trained parameters' updates (SGP gossips the model; optimizer
    // state such as momentum stays local, and per rank).
    std::vector<std::pair<Node*, Node*>> carried = CarriedTrainedParameters(graph);  // (parameter, its Feedback)
    if (carried.empty()) return absl::FailedPreconditionError("gossip: runs after an optimizer (sgd, adam)");
    RETURN_IF_ERROR(DeclareGossipGroup(graph, run.options.world));
    RETURN_IF_ERROR(AddMixingState(graph, run));
    ASSIGN_OR_RETURN(std::vector<PushedValue> pushed, PushedValues(graph, run, carried));
    ASSIGN_OR_RETURN(int buckets, PushAndMix(graph, run, carried, pushed));
    RecordGossip(graph, run, pushed.size(), static_cast<int>(carried.size()), buckets, log);
    return absl::OkStatus();
  }
};

PassInfo GossipInfo() {
  PassInfo info{"gossip",
                "Stochastic Gradient Push: each rank keeps its own parameters and, after each local step, mixes "
                "them with its out-neighbours' (peers per step, push-sum, uniform weights) over a time-varying directed graph.",
                {{"topology", OptionType::kString, "exponential",
                  "the graph mixed over (passes/*_topology.cc): exponential (i + 2^(t mod log2 n)), linear "
                  "(i + 1 + (t mod (n-1))), ring (i + 1), complete (every rank)"},
                 {"peers", OptionType::kInt, "1",
                  "out-neighbours per step: peer j takes the offset j steps ahead in the topology's cycle "
                  "(exponential: up to log2 n); each keeps and sends 1/(peers+1)"},
                 {"bucket_kb", OptionType::kInt, "4096",
                  "values pushed together in one message per peer, up to this many KiB (0: one message per "
                  "parameter)"},
                 {"overlap", OptionType::kInt, "0",
                  "tau: a push of step t is mixed in at step t+tau, so tau+1 steps run at once and the pushes "
                  "overlap the next steps' compute; the model read is the de-biased x / w (0: plain SGP)"}},
                [] { return std::make_unique<GossipPass>(); }};
  info.needs = {kOptimizerProperty};
  info.provides = {kGradientCommunicationProperty};
  info.precedes = {kPipelinedProperty};
  return info;
}

NEREID_REGISTER_PASS(GossipInfo());

}  // namespace
}  // namespace nereid
