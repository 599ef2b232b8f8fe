// lookahead: Pipe-SGD whose ranks compute their gradients where synchronous
// SGD would be, by looking ahead with their own fresh local gradient.
//
// With pipeline(width=2) the update at step t applies the averaged gradient
// of step t-1, g(t-1), which is still on the wire while step t computes, so
// step t's gradient is taken at w[t] while the update it feeds lands on
// w[t+1] = w[t] - lr g(t-1): one step stale. Delayed gradient descent is
// stable only for lr * curvature < 1 (synchronous SGD: < 2, more with
// momentum), which is what costs Pipe-SGD accuracy at the learning rates
// synchronous training likes.
//
// This pass evaluates each step's forward and backward passes at the rank's
// estimate of w[t+1] instead: the update the optimizer would make with the
// rank's own gradient of the previous step, l(t-1) (known locally, no
// communication), standing in for the average g(t-1):
//
//   w^(t) = Update(w[t], l(t-1), lr(t), optimizer state)     (the look-ahead)
//   w[t+1] = Update(w[t], g(t-1), lr(t), optimizer state)    (as before)
//
// With one worker l = g and w^(t) is w[t+1] exactly: the iterates are
// synchronous SGD's, one step later. With n workers w^(t) differs from it by
// one step of local gradient noise, lr (l(t-1) - g(t-1)); the mean dynamics
// are synchronous SGD's (its stability included) while the allreduce still
// overlaps the next step's compute. This is the correction of Delayed
// Gradient Averaging (Zhu et al., NeurIPS 2021), written so that the
// parameters w stay identical on every rank: only l(t-1) is per-rank state.
//
// In the graph, per trainable Parameter p with update node U (the optimizer's
// ApplySgd/ApplyAdam, whatever consumes p's Gradient node):
//   - "p/local_gradient": per-rank state fed (Feedback) by p's local gradient,
//     the input of data_parallel's AllReduce (or the gradient itself on one
//     worker);
//   - "p/lookahead": a copy of U (same op, attributes and inputs) reading
//     p/local_gradient instead of the delayed average; its output 0 replaces p
//     for every consumer but U and itself, evaluation included.
// A clip between the delay state and the optimizer scales the look-ahead's
// gradient by the same factor. Runs after the optimizer; needs
// pipeline(width=2) and, with several workers, data_parallel's plain or
// 16-bit AllReduce (a gradient codec's compressed allreduce is refused: its
// input is not the local gradient).

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

// What the optimizer's gradient is made of: the rank's own gradient before
// any averaging (through the pipeline's delay state and its Feedback to the
// AllReduce's input), and the scalings between the delay state and the
// Gradient node (clip's Mul by its factor), innermost first.
struct DelayedGradient {
  NodeOut local;
  std::vector<NodeOut> scales;
};

absl::StatusOr<DelayedGradient> TraceDelayedGradient(const Node& gradient) {
  DelayedGradient traced;
  const Edge* in = gradient.input_edge(0);
  while (in->src->op() == "Mul" && in->src->num_inputs() == 2) {
    const Edge* scale = in->src->input_edge(1);
    traced.scales.insert(traced.scales.begin(), NodeOut{scale->src, scale->src_port});
    in = in->src->input_edge(0);
  }
  const Node* delay = in->src;
  if (delay->op() != "Parameter" || delay->num_inputs() != 1 || delay->input_edge(0) == nullptr ||
      delay->input_edge(0)->src->op() != "Feedback") {
    return absl::FailedPreconditionError(absl::StrCat("lookahead: the input of '", gradient.name(), "' is '",
                                                      delay->name(), "', not the pipeline's delay state"));
  }
  const Edge* averaged = delay->input_edge(0)->src->input_edge(0);
  Node* source = averaged->src;
  if (source->op() == "AllReduce") {
    const Edge* local = source->input_edge(averaged->src_port);
    traced.local = NodeOut{local->src, local->src_port};
    return traced;
  }
  if (source->op() == "CompressedAllReduce") {
    return absl::FailedPreconditionError(absl::StrCat(
        "lookahead: '", gradient.name(), "' is averaged by the compressed allreduce '", source->name(),
        "', whose input is not the local gradient; use it with fp16/bf16 or no compression"));
  }
  traced.local = NodeOut{source, averaged->src_port};  // one worker: the gradient is the local one
  return traced;
}

// The optimizer's update of `param`: the one consumer of its Gradient node,
// reading the parameter at input 0 and the gradient at input 1.
absl::StatusOr<Node*> OptimizerUpdate(const Node& gradient, const Node* param) {
  Node* update = nullptr;
  for (const Edge* e : gradient.out_edges()) {
    if (update != nullptr && e->dst != update) {
      return absl::FailedPreconditionError(
          absl::StrCat("lookahead: gradient '", gradient.name(), "' has several consumers"));
    }
    update = e->dst;
  }
  auto input = [&](int port) { return update->num_inputs() > port ? update->input_edge(port) : nullptr; };
  if (param == nullptr || update == nullptr || input(0) == nullptr || input(0)->src != param ||
      input(1) == nullptr || input(1)->src != &gradient) {
    return absl::FailedPreconditionError(
        absl::StrCat("lookahead: no optimizer update of '", gradient.name(), "': run sgd or adam before it"));
  }
  return update;
}

class LookaheadPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext&, PassLog* log) override {
    const PlanRecords& records = graph.header().records();
    if (records.lookahead()) {
      return absl::FailedPreconditionError("lookahead: the graph already looks ahead (applied twice?)");
    }
    if (records.pipeline_width() == 0) {
      return absl::FailedPreconditionError("lookahead: needs pipeline(width=2) (and an optimizer) before it");
    }
    if (records.pipeline_width() != 2) {
      return absl::FailedPreconditionError(
          absl::StrCat("lookahead: pipeline width ", records.pipeline_width(), ": only width 2 is supported"));
    }
    int updated = 0;
    for (Node* gradient : graph.nodes()) {
      if (gradient->op() != "Gradient") continue;
      Node* param = graph.FindNode(gradient->def().attr().at("parameter").s());
      ASSIGN_OR_RETURN(Node * update, OptimizerUpdate(*gradient, param));
      ASSIGN_OR_RETURN(DelayedGradient traced, TraceDelayedGradient(*gradient));
      ASSIGN_OR_RETURN(Node * previous, AddState(graph, absl::StrCat(param->name(), "/local_gradient"),
                                                 param->outputs()[0].shape.dims(), /*per_rank=*/true));
      RETURN_IF_ERROR(CloseLoop(graph, previous, traced.local));
      // The look-ahead's gradient gets the delayed one's scalings: clipped by
      // the factor the averaged gradient was clipped by.
      NodeOut own{previous, 0};
      for (size_t k = 0; k < traced.scales.size(); ++k) {
        ASSIGN_OR_RETURN(Node * scaled, AddOpNode(&graph, absl::StrCat(param->name(), "/lookahead_scale", k), "Mul",
                                                  {own, traced.scales[k]}, {}));
        own = NodeOut{scaled, 0};
      }

      std::vector<NodeOut> inputs;
      for (int i = 0; i < update->num_inputs(); ++i) {
        const Edge* e = update->input_edge(i);
        inputs.push_back(i == 1 ? own : NodeOut{e->src, e->src_port});
      }
      std::vector<std::pair<std::string, AttrValue>> attrs(update->def().attr().begin(), update->def().attr().end());
      ASSIGN_OR_RETURN(Node * ahead, AddOpNode(&graph, absl::StrCat(param->name(), "/lookahead"), update->op(),
                                               inputs, std::move(attrs)));
      std::vector<const Edge*> readers = param->out_edges();  // copied: rewiring edits the list
      for (const Edge* e : readers) {
        if (e->dst == update || e->dst == ahead) continue;
        RETURN_IF_ERROR(graph.ReplaceInput(e->dst, e->dst_port, ahead, 0));
      }
      ++updated;
    }
    graph.mutable_header()->mutable_records()->set_lookahead(true);
    log->notes.push_back(absl::StrCat(updated, " parameters read at the look-ahead of the rank's own last gradient"));
    return absl::OkStatus();
  }
};

PassInfo LookaheadInfo() {
  PassInfo info{"lookahead",
                "With pipeline(width=2): each step computes at the weights the optimizer would reach with the rank's "
                "own last gradient in place of the average still on the wire (Delayed Gradient Averaging's "
                "correction), so the iterates follow synchronous SGD's while communication overlaps compute.",
                {},
                [] { return std::make_unique<LookaheadPass>(); }};
  info.needs = {kPipelinedProperty, kOptimizerProperty};
  info.provides = {kLookaheadProperty};
  return info;
}

NEREID_REGISTER_PASS(LookaheadInfo());

}  // namespace
}  // namespace nereid
