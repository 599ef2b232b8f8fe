#ifndef NEREID_PASSES_OPTIMIZER_COMMON_H_
#define NEREID_PASSES_OPTIMIZER_COMMON_H_

// What every optimizer pass does around its update op: find the gradients,
// add the learning-rate schedule, create optimizer state as Parameters, and
// close the training loop by carrying each updated value through a Feedback
// node into the next step's Parameter.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {

inline constexpr char kTrainLoop[] = "train";

// The training loop scope, created (max_in_flight 1) if the graph has none.
LoopScope* TrainLoop(Graph& graph);

// An optimizer pass's record: it needs gradients and provides the optimizer.
PassInfo OptimizerPassInfo(std::string name, std::string summary, std::vector<PassOptionSpec> options,
                           std::function<std::unique_ptr<Pass>()> factory);

struct GradientOfParameter {
  Node* parameter;
  Node* gradient;  // the Gradient node
};

// Every Gradient node with its Parameter; an error if there are none (the
// optimizer needs autodiff first) or a parameter already has an update.
absl::StatusOr<std::vector<GradientOfParameter>> FindGradients(Graph& graph);

// The options every optimizer shares: lr and its schedule.
std::vector<PassOptionSpec> LearningRateOptions(const std::string& default_lr);
// Adds "optimizer/learning_rate" from those options.
absl::StatusOr<Node*> AddLearningRate(Graph& graph, const PassOptions& options);

// A zero-initialised, non-trainable Parameter shaped like `like`, named
// "<like>/<suffix>" (momentum buffers, Adam moments).
// An error if both the optimizer (`optimizer_momentum`) and a codec of the
// plan apply momentum: applied twice, training stalls (top-k with sgd
// momentum 0.9 trains to chance).
absl::Status CheckMomentumAppliedOnce(const Graph& graph, double optimizer_momentum);

absl::StatusOr<Node*> AddStateLike(Graph& graph, const Node& like, const std::string& suffix);

// A zero-initialised, non-trainable Parameter `name` of `dims`; `per_rank`
// marks state each data-parallel rank keeps its own value of.
absl::StatusOr<Node*> AddState(Graph& graph, const std::string& name, const std::vector<int64_t>& dims,
                               bool per_rank = false);

// A piece of state `whole` as a Parameter of its own, `name`, of `size`
// elements, starting from elements [begin, begin + size) of whole's
// flattened initial value (a parameter server's chunk, a colocated
// server's shard; ops/io_ops.cc, init_offset).
absl::StatusOr<Node*> AddStatePiece(Graph& graph, const Node& whole, const std::string& name, int64_t begin,
                                    int64_t size);

// The `value` attribute of a float32 Const of shape [1] holding `v`.
AttrValue ScalarConstValue(float v);

// Decentralised plans (gossip, power_gossip), where every rank keeps its own
// model: every trained Parameter an optimizer carries, with its Feedback
// (whose input is the updated value), in graph order. All of them and every
// state Parameter carried from step to step (optimizer state, batch-norm
// statistics) are marked per rank on the way.
std::vector<std::pair<Node*, Node*>> CarriedTrainedParameters(Graph& graph);

// Carries value `next` into `parameter` at the next step: adds
// Feedback "<parameter>/next" and connects it to the Parameter's `next`
// input, and records both in the training loop scope.
absl::Status CloseLoop(Graph& graph, Node* parameter, NodeOut next);

// Removes state `parameter`, the Feedback carrying it (if any) and both
// from the training loop scope: the inverse of CloseLoop.
absl::Status RemoveState(Graph& graph, Node* parameter);

// Wires the state updates ops declare (batch norm's running statistics)
// through Feedback nodes, for every state Parameter not yet carried.
absl::StatusOr<int> CloseStateUpdates(Graph& graph);

}  // namespace nereid

#endif  // NEREID_PASSES_OPTIMIZER_COMMON_H_
