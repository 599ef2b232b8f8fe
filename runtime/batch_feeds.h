#ifndef NEREID_RUNTIME_BATCH_FEEDS_H_
#define NEREID_RUNTIME_BATCH_FEEDS_H_

// How a batch of the dataset becomes the executor's feeds, as the model's
// images Input declares them:
//   - its dtype: integer token ids are carried exactly in the dataset's
//     floats (the readers refuse ids above 2^24) and become int32 / int64
//     here; a value that is not a whole number is an error naming it;
//   - its per-example dims: a batch of [N, D] rows feeds an Input of any
//     shape with D elements per example ([?, T] ids, [?, C, H, W] images).
// Labels are fed as int32 [N].

#include <vector>

#include "absl/status/statusor.h"
#include "data/batch_loader.h"
#include "graph/ir.h"
#include "schedulers/executor.h"

namespace nereid {

struct FeedLayout {
  DataType images_dtype = DT_FLOAT;
  std::vector<int64_t> example_dims;  // the Input's dims after the batch; empty: the batch's own
};

// The layout of the Input node fed "images" in `graph` (the default layout
// when the graph has none, as a parameter server's rank).
FeedLayout FeedLayoutOf(const Graph& graph);

absl::StatusOr<FeedMap> FeedsOf(const data::Batch& batch, const FeedLayout& layout);

}  // namespace nereid

#endif  // NEREID_RUNTIME_BATCH_FEEDS_H_
