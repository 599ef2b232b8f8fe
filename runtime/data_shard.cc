#include "runtime/data_shard.h"

#include "absl/strings/str_cat.h"

namespace nereid {

absl::StatusOr<DataShard> DataShardOf(const Graph& graph, int rank, int world) {
  const PlanRecords& records = graph.header().records();
  const int64_t servers = records.parameter_server().servers();
  const int64_t readers = world - servers;
  const int64_t replicas = records.data_replicas() > 0 ? records.data_replicas() : readers;
  if (servers < 0 || readers < 1 || replicas < 1 || replicas > readers || readers % replicas != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the plan's data_replicas is ", replicas,
                                                   ": it must divide the ", readers, " ranks that read data"));
  }
  return DataShard{rank < readers ? static_cast<int>(rank % replicas) : 0, static_cast<int>(replicas)};
}

const Node* ImagesInput(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    const auto& attr = n->def().attr();
    if (n->op() == "Input" && attr.count("feed") && attr.at("feed").s() == "images") return n;
  }
  return nullptr;
}

bool EqualShards(const Graph& graph) { return graph.header().records().group_size() > 0; }

data::DatasetOptions DatasetOptionsFor(const Graph& graph, const std::string& dataset_name,
                                       const TrainOptions& options) {
  data::DatasetOptions dopts;
  dopts.dir = options.data_dir;
  const Node* images = ImagesInput(graph);
  if (dataset_name == "synthetic") {
    if (images != nullptr && images->outputs()[0].shape.rank() == 4) {
      const TensorShape& s = images->outputs()[0].shape;
      dopts.channels = s.dim(1);
      dopts.height = s.dim(2);
      dopts.width = s.dim(3);
    }
    auto classes = graph.header().attr().find("num_classes");
    if (classes != graph.header().attr().end()) dopts.num_classes = static_cast<int>(classes->second.i());
  }
  if (data::IsTextDataset(dataset_name) && images != nullptr) {
    const TensorShape& s = images->outputs()[0].shape;
    if (s.rank() == 2 && s.dim(1) > 0) dopts.sequence_length = s.dim(1);
  }
  dopts.seed = options.seed;
  return dopts;
}

}  // namespace nereid
