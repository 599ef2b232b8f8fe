#ifndef NEREID_RUNTIME_DATA_SHARD_H_
#define NEREID_RUNTIME_DATA_SHARD_H_

// Which part of the data a rank reads, and the dataset options a plan implies.

#include <string>

#include "absl/status/statusor.h"
#include "data/datasets.h"
#include "graph/ir.h"
#include "runtime/trainer.h"

namespace nereid {

// The data a rank reads: shard `index` of `count`. Ranks whose parts of a
// placed plan form one model read the same batches (the plan's records:
// data_replicas: how many copies of the model the ranks hold; default: one
// per rank).
struct DataShard {
  int index = 0, count = 1;
};

// Ranks from world - servers on (records.parameter_server.servers: the
// servers) read no data; they step with shard 0.
absl::StatusOr<DataShard> DataShardOf(const Graph& graph, int rank, int world);

// The Input the batches' samples feed (feed "images"); null in a part that
// reads no data (a parameter server's).
const Node* ImagesInput(const Graph& graph);

// Whether the plan declares process groups: their collectives exchange
// batches, so every rank's must be the same size. From the whole plan, so
// every rank decides alike (a rank need not be in every group).
bool EqualShards(const Graph& graph);

// The dataset options for `graph`: synthetic data takes the shape the model's
// images input declares.
data::DatasetOptions DatasetOptionsFor(const Graph& graph, const std::string& dataset_name,
                                       const TrainOptions& options);

}  // namespace nereid

#endif  // NEREID_RUNTIME_DATA_SHARD_H_
