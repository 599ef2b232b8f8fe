#ifndef NEREID_OPS_LIVE_SET_H_
#define NEREID_OPS_LIVE_SET_H_

// The memory a training step of a plan needs at its peak, predicted from the
// plan alone: the executor's order (first ready, first run, one node at a
// time, as with one thread) replayed over the nodes' output sizes. Every
// Parameter's value (weights and optimizer state) lives throughout; each
// other node's outputs live from the node's run until its last consumer in
// the step has run (so a value with no consumer dies at once); the value a
// Feedback carries into the next step lives to the step's end. Every output
// is a fresh allocation of its own, rounded up to `granularity` bytes, as on
// a device (schedulers/device_streams.h): the host's reshapes, which share
// their input's buffer, are counted as copies.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

struct LiveSet {
  int64_t state_bytes = 0;  // the Parameters' values
  int64_t peak_bytes = 0;   // state included
  std::string peak_after;   // the node whose outputs made the peak
};

// `graph` must be shape-inferred; its unknown dimensions are the batch, taken
// as `batch`. Only the outputs of nodes for which `counted` is true count
// (e.g. those placed on a device).
absl::StatusOr<LiveSet> PredictStepLiveSet(const Graph& graph, int64_t batch, int64_t granularity,
                                           const std::function<bool(const Node&)>& counted);

}  // namespace nereid

#endif  // NEREID_OPS_LIVE_SET_H_
