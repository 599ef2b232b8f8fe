#include "passes/gradient_delay.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/op_registry.h"
#include "passes/optimizer_common.h"
#include "passes/pass_properties.h"

namespace nereid {

absl::StatusOr<DelayedGradients> DelayGradients(Graph& graph, int64_t width, const char* pass) {
  if (width < 1 || width > 64) {
    return absl::InvalidArgumentError(absl::StrCat(pass, ": width=", width, " must be in [1, 64]"));
  }
  if (graph.header().records().pipeline_width() > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        pass, ": the graph is already pipelined (applied twice, or after parameter_server(mode=ssp)?)"));
  }
  std::vector<Node*> gradients;
  for (Node* n : graph.nodes()) {
    if (n->op() == "Gradient") gradients.push_back(n);
  }
  if (gradients.empty()) return absl::FailedPreconditionError(absl::StrCat(pass, ": no Gradient nodes; run autodiff first"));
  DelayedGradients delayed_gradients;
  for (Node* gradient : gradients) {
    const Edge* in = gradient->input_edge(0);
    NodeOut previous{in->src, in->src_port};
    for (int64_t k = 1; k < width; ++k) {
      ASSIGN_OR_RETURN(Node * delayed, AddStateLike(graph, *gradient, absl::StrCat("delay_", k)));
      RETURN_IF_ERROR(CloseLoop(graph, delayed, previous));
      previous = {delayed, 0};
    }
    if (width > 1) RETURN_IF_ERROR(graph.ReplaceInput(gradient, 0, previous.node, previous.port));
    ++delayed_gradients.gradients;
    delayed_gradients.state_bytes += gradient->outputs()[0].shape.KnownElements() * 4 * (width - 1);
  }
  // A bound set before (gossip's overlap) stays when it is the larger.
  LoopScope* loop = TrainLoop(graph);
  loop->set_max_in_flight(std::max(loop->max_in_flight(), static_cast<int32_t>(width)));
  graph.mutable_header()->mutable_records()->set_pipeline_width(static_cast<int32_t>(width));
  return delayed_gradients;
}

}  // namespace nereid
