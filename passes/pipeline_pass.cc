// pipeline(width=K): Pipe-SGD's bounded-staleness pipelining.
//
// The update at iteration t applies the gradient computed on the parameters
// of iteration t-K+1, so iterations t..t+K-1 may be in flight at once and the
// allreduce of iteration t overlaps the forward and backward passes of the
// next K-1 iterations:
//
//   w[t+1] = w[t] - lr * g(w[t-K+1])      (g of a negative iteration is 0)
//
// In the graph this is a delay line (passes/gradient_delay.h, shared with
// the parameter server's stale-synchronous mode): each Gradient node's input
// (the averaged gradient, when data_parallel ran first) is carried through
// K-1 zero-started state Parameters, so the optimizer at step t reads the
// gradient of step t-K+1. Nothing special is asked of the executor: the
// training loop's max_in_flight becomes K, which the progress tracker
// enforces as its frontier bound (step s may begin once step s-K is
// complete, i.e. once its gradients were received and stored). K=1 leaves
// the graph unchanged: synchronous training, bit for bit.
//
// Weight decay and momentum, which the optimizer computes, see the delayed
// gradient and the current parameters. The delayed gradients are state: they
// are checkpointed, checked identical across ranks at start-up, and resumed.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "passes/gradient_delay.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

class PipelinePass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    const int64_t width = o.GetInt("width");
    ASSIGN_OR_RETURN(DelayedGradients delayed, DelayGradients(graph, width, "pipeline"));
    if (width == 1) {
      log->notes.push_back("width 1: synchronous, graph unchanged");
    } else {
      log->notes.push_back(absl::StrCat(width, " steps in flight; ", delayed.gradients, " gradients delayed by ",
                                        width - 1, " step", width == 2 ? "" : "s", " (", delayed.state_bytes,
                                        " bytes of state)"));
    }
    return absl::OkStatus();
  }
};

PassInfo PipelineInfo() {
  PassInfo info{"pipeline",
                "Pipe-SGD: the update at step t applies the gradient of step t-width+1, so up to width steps run at "
                "once and communication overlaps the next steps' compute.",
                {{"width", OptionType::kInt, "2", "steps in flight (1: synchronous)"}},
                [] { return std::make_unique<PipelinePass>(); }};
  info.needs = {kGradientsProperty};
  info.provides = {kPipelinedProperty};
  return info;
}

NEREID_REGISTER_PASS(PipelineInfo());

}  // namespace
}  // namespace nereid
