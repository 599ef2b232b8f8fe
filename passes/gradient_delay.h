#ifndef NEREID_PASSES_GRADIENT_DELAY_H_
#define NEREID_PASSES_GRADIENT_DELAY_H_

// Bounded staleness, the one mechanism behind Pipe-SGD (`pipeline(width=K)`)
// and the parameter server's stale-synchronous mode
// (`parameter_server(mode=ssp, staleness=s)`, K = s + 1):
//
//   w[t+1] = w[t] - lr * g(w[t-K+1])      (g of a negative step is 0)
//
// Each Gradient node's input is carried through K-1 zero-started state
// Parameters, each fed by a Feedback from the one before, so the update at
// step t reads the gradient of step t-K+1; the training loop's
// max_in_flight becomes K (kept if already larger), which the progress
// tracker enforces as its frontier bound. K = 1 leaves the graph unchanged.
// The delay states are ordinary state: checkpointed, checked at start-up,
// resumed, and placed where their Gradient node is.

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

struct DelayedGradients {
  int gradients = 0;         // Gradient nodes delayed
  int64_t state_bytes = 0;   // the delay line's state, all ranks together
};

// InvalidArgument unless 1 <= width <= 64; FailedPrecondition when the graph
// is pipelined already (records.pipeline_width) or has no Gradient node. Sets
// the plan's records.pipeline_width to `width`.
absl::StatusOr<DelayedGradients> DelayGradients(Graph& graph, int64_t width, const char* pass);

}  // namespace nereid

#endif  // NEREID_PASSES_GRADIENT_DELAY_H_
