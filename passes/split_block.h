#ifndef NEREID_PASSES_SPLIT_BLOCK_H_
#define NEREID_PASSES_SPLIT_BLOCK_H_

// A block of layers that a model-parallel group can hold in shards, as in
// Megatron-LM: column layers that read one input (an MLP's first layer, or
// attention's query, key and value projections), the ops between them, and
// one row layer that sums the shards' partial products (the MLP's second
// layer, attention's output projection).
//
// Cutting the column layers' weights into column blocks cuts their outputs
// along the last axis. That cut is followed through the ops in between (a
// reshape into heads, a transpose, the attention's batched products, masks
// and softmax over other axes, elementwise ops and biases) to the row layer,
// whose input must arrive cut along its last (contracted) axis: its weight
// is then cut into row blocks, and each member's product is a partial sum.
// An op that would mix the blocks (a softmax or LayerNorm over the cut axis,
// a product contracting it) ends the search: those layers stay whole.

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

// A MatMul or BatchMatMul of an activation (rank >= 2) by a plain 2-D weight
// Parameter, without transposes: a dense layer whose weight can be cut.
bool IsDenseLayer(const Node& n);
// The weight Parameter of a dense layer.
Node* WeightOf(const Node& dense);

struct SplitBlock {
  std::vector<Node*> columns;  // their weights are cut into column blocks; they share input 0
  Node* rows = nullptr;        // its weight is cut into row blocks
  std::vector<Node*> between;  // the ops from the columns to the rows, in topological order
  // Parameters cut with the columns (their biases): the parameter and its axis.
  std::vector<std::pair<Node*, int>> cut_parameters;
  // Reshapes whose target has the cut axis: the node and the target's axis.
  std::vector<std::pair<Node*, int>> cut_reshapes;
};

// The block whose row layer is `rows`, its column layers drawn from
// `candidates` (dense layers not yet in a block). An error (FailedPrecondition)
// says why there is none: the caller keeps those layers whole and notes it.
// `order` is the graph's topological order.
absl::StatusOr<SplitBlock> FindSplitBlock(Node* rows, const absl::flat_hash_set<const Node*>& candidates,
                                          const std::vector<Node*>& order);

// Divides the cut axis of the block's reshape targets into `group` shards.
absl::Status CutReshapes(Graph& graph, const SplitBlock& block, int64_t group);

}  // namespace nereid

#endif  // NEREID_PASSES_SPLIT_BLOCK_H_
