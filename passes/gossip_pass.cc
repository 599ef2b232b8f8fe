// gossip: Stochastic Gradient Push (Assran et al., 2019). Every rank keeps
// its own parameters; after each local optimizer step it keeps half
// of every updated value and pushes the other half to its out-neighbour of
// the step, adding what its in-neighbour pushed (push-sum with uniform
// mixing). The push is a GroupSendRecv on a group of all ranks, whose
// offsets change with the step: SGP's time-varying directed exponential
// graph (at step t rank i sends to i + 2^(t mod log2 n)) or a ring (i + 1).
// On the complete graph every rank sends 1/n to every other (a
// GroupAllReduce scaled by 1/n): one step gives the allreduce average.
//
// Push-sum carries a weight beside the parameters (state "gossip/weight",
// per rank, checkpointed): w' = (w + w_in) / 2. In the topologies built here
// every rank receives exactly one message per step, so every weight stays
// 1 and the de-biased model z / w is the parameters themselves; the weight is
// still computed, so a topology where it does not stay 1 shows in it.
//
// Replaces data_parallel (it provides the gradient communication): the
// ranks' parameters, optimizer state included, differ between ranks (per
// rank), and their average converges to the allreduce model's.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "graph/process_groups.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

constexpr char kGossipGroup[] = "gossip";

// The out-neighbour offsets the steps cycle through.
// (complete: none; every rank is an out-neighbour.)
absl::StatusOr<std::vector<int64_t>> TopologyOffsets(const std::string& topology, int64_t world) {
  if (topology == "complete") return std::vector<int64_t>{};
  if (topology == "ring") return std::vector<int64_t>{1};
  if (topology == "exponential") {
    std::vector<int64_t> offsets;
    for (int64_t o = 1; o < world; o *= 2) offsets.push_back(o);
    return offsets;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("gossip: topology '", topology, "' is not one of: exponential, ring, complete"));
}

class GossipPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassOptions& o, PassLog* log) override {
    const int64_t world = GraphAttrInt(graph, "workers", 0);
    if (world < 2) {
      return absl::FailedPreconditionError(
          "gossip: the plan needs at least 2 workers (plan with --workers N, run with --workers N)");
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> offsets, TopologyOffsets(o.GetString("topology"), world));
    // The trained parameters' updates (SGP gossips the model; optimizer
    // state such as momentum stays local, and per rank).
    std::vector<std::pair<Node*, Node*>> carried;  // (parameter, its Feedback)
    for (Node* n : graph.nodes()) {
      if (n->op() != "Parameter" || n->num_inputs() != 1) continue;
      if (!NodeAttrBool(*n, "trainable", true)) {
        (*n->mutable_def()->mutable_attr())["per_rank"] = BoolAttr(true);
        continue;
      }
      Node* feedback = n->input_edge(0)->src;
      if (feedback->op() == "Feedback") carried.emplace_back(n, feedback);
    }
    if (carried.empty()) return absl::FailedPreconditionError("gossip: runs after an optimizer (sgd, adam)");
    ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(graph));
    for (const GroupDecl& g : groups) {
      if (g.name == kGossipGroup) return absl::FailedPreconditionError("gossip: applied twice");
    }
    groups.push_back(GroupDecl{kGossipGroup, GroupLayout::kBlocks, static_cast<int>(world)});
    (*graph.mutable_header()->mutable_attr())["groups"] = StringAttr(GroupDeclsText(groups));

    ASSIGN_OR_RETURN(Node * weight, AddState(graph, "gossip/weight", {1}, /*per_rank=*/true));
    (*weight->mutable_def()->mutable_attr())["init"].mutable_tensor()->mutable_init()->set_kind("ones");
    AttrValue half_value;
    TensorProto* half = half_value.mutable_tensor();
    half->set_dtype(DT_FLOAT);
    half->mutable_shape()->add_dim(1);
    const bool complete = offsets.empty();
    half->add_float_val(complete ? 1.0f / static_cast<float>(world) : 0.5f);
    ASSIGN_OR_RETURN(Node * mix, AddOpNode(&graph, "gossip/mixing_weight", "Const", {}, {{"value", half_value}}));
    std::vector<std::pair<std::string, AttrValue>> push = {{"group", StringAttr(kGossipGroup)},
                                                          {"group_size", IntAttr(world)}};
    if (!complete) push.emplace_back("offsets", IntListAttr(offsets));
    // Keep half, push half, add what arrives: (x + x_in) / 2; complete: the
    // sum of every rank's share, sum / n.
    auto mixed = [&](const std::string& name, NodeOut value) -> absl::StatusOr<NodeOut> {
      NodeOut sum_out;
      if (complete) {
        ASSIGN_OR_RETURN(Node * all, AddOpNode(&graph, absl::StrCat(name, "/gossip/push"), "GroupAllReduce", {value}, push));
        sum_out = NodeOut{all, 0};
      } else {
        ASSIGN_OR_RETURN(Node * in, AddOpNode(&graph, absl::StrCat(name, "/gossip/push"), "GroupSendRecv", {value}, push));
        ASSIGN_OR_RETURN(Node * sum, AddOpNode(&graph, absl::StrCat(name, "/gossip/sum"), "Add", {value, NodeOut{in, 0}}));
        sum_out = NodeOut{sum, 0};
      }
      ASSIGN_OR_RETURN(Node * out, AddOpNode(&graph, absl::StrCat(name, "/gossip/mixed"), "Mul",
                                             {sum_out, NodeOut{mix, 0}}));
      return NodeOut{out, 0};
    };
    int mixed_values = 0;
    for (auto& [parameter, feedback] : carried) {
      const Edge* in = feedback->input_edge(0);
      ASSIGN_OR_RETURN(NodeOut next, mixed(parameter->name(), NodeOut{in->src, in->src_port}));
      RETURN_IF_ERROR(graph.ReplaceInput(feedback, 0, next.node, next.port));
      (*parameter->mutable_def()->mutable_attr())["per_rank"] = BoolAttr(true);
      ++mixed_values;
    }
    ASSIGN_OR_RETURN(NodeOut next_weight, mixed("gossip/weight", NodeOut{weight, 0}));
    RETURN_IF_ERROR(CloseLoop(graph, weight, next_weight));
    (*graph.mutable_header()->mutable_attr())["gossip"] = StringAttr(o.GetString("topology"));
    log->notes.push_back(absl::StrCat(mixed_values, " values mixed per step (", o.GetString("topology"),
                                      complete ? ": every rank" : absl::StrCat(": offsets ", absl::StrJoin(offsets, ",")),
                                      "), push-sum weight gossip/weight"));
    return absl::OkStatus();
  }
};

PassInfo GossipInfo() {
  PassInfo info{"gossip",
                "Stochastic Gradient Push: each rank keeps its own parameters and, after each local step, mixes "
                "them with one out-neighbour's (push-sum, uniform weights) over a time-varying directed graph.",
                {{"topology", OptionType::kString, "exponential",
                  "exponential (i + 2^(t mod log2 n)), ring (i + 1) or complete (every rank)"}},
                [] { return std::make_unique<GossipPass>(); }};
  info.needs = {kOptimizerProperty};
  info.provides = {kGradientCommunicationProperty};
  info.precedes = {kPipelinedProperty};
  return info;
}

NEREID_REGISTER_PASS(GossipInfo());

}  // namespace
}  // namespace nereid
