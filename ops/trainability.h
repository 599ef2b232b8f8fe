#ifndef NEREID_OPS_TRAINABILITY_H_
#define NEREID_OPS_TRAINABILITY_H_

// Whether a loaded model can be trained as written: what `nereid run` would
// otherwise find out only at its first step. Each error says what to add or
// change.
//   - graph attribute `loss` names a node whose output 0 is a float scalar;
//   - graph attribute `logits`, when set, names a node of rank 2;
//   - every Input is fed by the dataset: its feed (the `feed` attribute, else
//     its name) is `images` or `labels`; labels are int32 [-1]; the images
//     Input holds as many elements per example as the dataset's images when
//     the dataset is one whose shape is known.

#include <string>

#include "absl/status/status.h"
#include "graph/ir.h"

namespace nereid {

struct TrainabilityReport {
  std::string loss;    // the loss node
  std::string images;  // "images [?,1,28,28] float32"
  std::string labels;  // "labels [?] int32"
};

// `dataset`: the name training will use ("" = the graph's attribute).
absl::StatusOr<TrainabilityReport> CheckTrainable(const Graph& graph, const std::string& dataset = "");

}  // namespace nereid

#endif  // NEREID_OPS_TRAINABILITY_H_
