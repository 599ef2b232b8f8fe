#ifndef NEREID_PASSES_COLOCATED_SHARDS_H_
#define NEREID_PASSES_COLOCATED_SHARDS_H_

// Colocated parameter servers through collectives: every rank trains and
// serves 1/world of every parameter, and the pushes and pulls of a bucket of
// parameters are one reduce-scatter and one all-gather over the world
// (ZeRO's shape: Rajbhandari et al., 2020). Point to point, a step costs each
// rank a message per chunk and peer; here, two collectives per bucket,
// whose ring the shared-memory transport runs with as few hand-offs as
// data parallelism's allreduce, and each rank updates only its own shard.
//
//   every rank:  gradients of the bucket, each flattened, padded to world x B
//                and laid out [world, B] -> concat on axis 1 -> [world, S]
//                -> GroupReduceScatter -> [S] (this rank's block of each
//                parameter) x 1/world
//                -> each parameter's update on its shard of P and of its
//                   optimizer state ([B] Parameters, shard_group "ps_shards")
//                -> concat -> GroupAllGather -> [world, S] -> each
//                   parameter's columns -> P's next value, which every rank
//                   keeps (P stays, no longer trained itself)
//
// The arithmetic is data_parallel's: the mean of the ranks' gradients,
// applied once, by the same update op, element by element.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"

namespace nereid {

// A trained parameter whose update runs element by element on state that
// only the update reads (passes/parameter_server_pass.cc checks both).
struct ShardableParameter {
  Node* parameter = nullptr;
  Node* gradient = nullptr;  // its Gradient node
  Node* update = nullptr;    // the elementwise op making its next value
};

// The group the shards and the collectives use: every rank of the world.
inline constexpr char kColocatedShardGroup[] = "ps_shards";

// Rewrites the plan as above, buckets of at most `bucket_bytes` of
// gradients in the order the backward pass makes them. Returns the note
// the pass prints.
absl::StatusOr<std::string> ShardOverColocatedServers(Graph& graph, const std::vector<ShardableParameter>& parameters,
                                                      int world, int64_t bucket_bytes);

}  // namespace nereid

#endif  // NEREID_PASSES_COLOCATED_SHARDS_H_
