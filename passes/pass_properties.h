#ifndef NEREID_PASSES_PASS_PROPERTIES_H_
#define NEREID_PASSES_PASS_PROPERTIES_H_

// The graph properties passes declare they need, provide or must precede
// (PassInfo::needs/provides/precedes). A new pass names the facts it relies
// on here rather than looking for another pass's traces in the graph.

#include "absl/strings/string_view.h"
#include "graph/ir.h"

namespace nereid {

// A Gradient node per trainable parameter (autodiff).
inline constexpr char kGradientsProperty[] = "gradients";
// Every trainable parameter has an update node (sgd, adam).
inline constexpr char kOptimizerProperty[] = "optimizer";
// Gradients are combined across ranks (data_parallel).
inline constexpr char kGradientCommunicationProperty[] = "gradient_communication";
// The gradient communication is compressed (compress).
inline constexpr char kCompressedProperty[] = "compressed";
// Several steps in flight with delayed gradients (pipeline).
inline constexpr char kPipelinedProperty[] = "pipelined";
// Layers are sharded over process groups (hybrid_partition).
inline constexpr char kModelPartitionedProperty[] = "model_partitioned";
// Gradients are scaled to a bounded global norm (clip); gradient
// communication must come first, so that the norm is the averaged one.
inline constexpr char kClippedProperty[] = "clipped";
// Steps compute at the optimizer's look-ahead weights (lookahead).
inline constexpr char kLookaheadProperty[] = "lookahead";
// Every node has a device (place), and the copies between host and device
// are in the graph; no pass may follow (PassInfo::runs_last).
inline constexpr char kPlacedProperty[] = "placed";

// The process group the gossip pass pushes over (its GroupSendRecv nodes,
// or GroupAllReduce on the complete topology).
inline constexpr char kGossipGroup[] = "gossip";
// The gossip passes' push-sum weight (a per-rank Parameter); the plan's
// gossip record names it and the in-flight states for the runtime.
inline constexpr char kPushSumWeightState[] = "gossip/weight";

// Whether a graph planned earlier (a plan file given to another pipeline)
// already has `property`, for the properties a pass may have to precede.
// The one place that reads a pass's traces in the graph.
bool GraphHasProperty(const Graph& graph, absl::string_view property);

}  // namespace nereid

#endif  // NEREID_PASSES_PASS_PROPERTIES_H_
