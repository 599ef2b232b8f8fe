// stage_split: model parallelism by layers. The model is cut before each
// layer named in `at`; part s runs on rank s (graph/placement.h), and each
// value that crosses a cut goes through a Send on the producing rank and a
// Recv on the consuming one. Runs before autodiff, which derives the backward
// transfers (the gradient of a Recv goes back through a Send/Recv pair), so
// activations travel forward and their gradients backward with no
// hand-written communication; the optimizer's updates follow their
// parameters.
//
// Every rank reads the same batch (the plan records data_replicas = 1): the
// first part needs the inputs, the last the labels. Each parameter lives on
// one rank only, so its gradient is already the whole batch's: no gradient
// communication is needed (the pass provides it, and data_parallel is not
// added). The plan's `workers` must equal the number of parts.

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "graph/placement.h"
#include "ops/gradient_builder.h"
#include "ops/topo_order.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

class StageSplitPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    for (Node* n : graph.nodes()) {
      if (n->op() == "Gradient") return absl::FailedPreconditionError("stage_split: runs before autodiff");
      if (!PlacementOf(*n).everywhere()) return absl::FailedPreconditionError("stage_split: the model is placed already");
    }
    ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
    // The cuts: part i + 1 starts at cut i.
    absl::flat_hash_map<const Node*, int> starts_part;
    for (absl::string_view name : absl::StrSplit(o.GetString("at"), '+', absl::SkipWhitespace())) {
      Node* n = graph.FindNode(name);
      if (n == nullptr) n = graph.FindNode(absl::StrCat(name, "/matmul"));
      if (n == nullptr) n = graph.FindNode(absl::StrCat(name, "/conv"));
      if (n == nullptr || n->num_inputs() == 0) {
        return absl::InvalidArgumentError(absl::StrCat("stage_split: at: '", name, "' is not a layer of the model"));
      }
      if (starts_part.contains(n)) {
        return absl::InvalidArgumentError(absl::StrCat("stage_split: at: '", name, "' is named twice"));
      }
      starts_part[n] = static_cast<int>(starts_part.size()) + 1;
    }
    if (starts_part.empty()) return absl::InvalidArgumentError("stage_split: at: name the layers to cut before");
    const int parts = static_cast<int>(starts_part.size()) + 1;
    const int64_t workers = context.target.workers;
    if (workers != parts) {
      return absl::FailedPreconditionError(absl::StrCat("stage_split: ", parts, " parts run on ", parts,
                                                        " workers, but the plan is for ",
                                                        workers < 1 ? std::string("an unknown number (plan with --workers N)")
                                                                    : absl::StrCat(workers)));
    }
    // A node's part: the latest of its inputs' (at least the first), or its
    // cut's. Sources (parameters, constants) join their first consumer's.
    absl::flat_hash_map<const Node*, int> part;
    for (Node* n : order) {
      int p = n->num_inputs() > 0 ? 0 : -1;
      for (int i = 0; i < n->num_inputs(); ++i) {
        auto it = part.find(n->input_edge(i)->src);
        if (it != part.end()) p = std::max(p, it->second);
      }
      auto cut = starts_part.find(n);
      if (cut != starts_part.end()) {
        if (p > cut->second) {
          return NodeError(graph, *n, absl::StrCat("stage_split: cut ", cut->second, " lies before an earlier cut; "
                                                   "name the layers in the order the model runs them"));
        }
        p = cut->second;
      }
      if (p >= 0) part[n] = p;
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (part.contains(n) || n->op() == "Input") continue;  // every rank is fed the batch
      int p = parts;
      for (const Edge* e : n->out_edges()) {
        auto c = part.find(e->dst);
        if (c != part.end()) p = std::min(p, c->second);
      }
      part[n] = p == parts ? 0 : p;
    }
    for (auto& [n, p] : part) SetPlacement(*graph.FindNode(n->name()), Placement{p, ""});
    // Each value that crosses into a later part: one Send/Recv pair per
    // receiving part.
    int pairs = 0;
    for (Node* dst : order) {
      auto d = part.find(dst);
      if (d == part.end()) continue;
      for (int i = 0; i < dst->num_inputs(); ++i) {
        const Edge* in = dst->input_edge(i);
        auto s = part.find(in->src);
        if (s == part.end() || s->second == d->second) continue;
        const std::string base = absl::StrCat(in->src->name(), in->src_port == 0 ? "" : absl::StrCat("_", in->src_port),
                                              "/to_rank", d->second);
        Node* recv = graph.FindNode(absl::StrCat(base, "/recv"));
        if (recv == nullptr) {
          ASSIGN_OR_RETURN(Node * send, AddOpNode(&graph, absl::StrCat(base, "/send"), "Send",
                                                  {NodeOut{in->src, in->src_port}}));
          SetPlacement(*send, Placement{s->second, ""});
          ASSIGN_OR_RETURN(recv, AddOpNode(&graph, absl::StrCat(base, "/recv"), "Recv", {NodeOut{send, 0}}));
          SetPlacement(*recv, Placement{d->second, ""});
          ++pairs;
        }
        RETURN_IF_ERROR(graph.ReplaceInput(dst, i, recv, 0));
      }
    }
    graph.mutable_header()->mutable_records()->set_data_replicas(1);
    std::vector<std::string> where;
    for (Node* n : order) {
      if (starts_part.contains(n)) where.push_back(absl::StrCat("rank ", starts_part[n], " from ", n->name()));
    }
    log->notes.push_back(absl::StrCat(parts, " parts (", absl::StrJoin(where, ", "), "), ", pairs,
                                      " Send/Recv pairs forward; autodiff adds the backward ones"));
    return absl::OkStatus();
  }
};

PassInfo StageSplitInfo() {
  PassInfo info{"stage_split",
                "Model parallelism by layers: the model is cut before each named layer and part s runs on rank s; "
                "values cross the cuts through Send/Recv pairs, whose gradients autodiff derives.",
                {{"at", OptionType::kString, "", "the layers each later part starts at, joined by + (fc2+fc3)"}},
                [] { return std::make_unique<StageSplitPass>(); }};
  // Each parameter has one holder, whose gradient is the whole batch's.
  info.provides = {kModelPartitionedProperty, kGradientCommunicationProperty};
  info.precedes = {kGradientsProperty};
  return info;
}

NEREID_REGISTER_PASS(StageSplitInfo());

}  // namespace
}  // namespace nereid
