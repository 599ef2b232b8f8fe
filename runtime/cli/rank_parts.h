#ifndef NEREID_RUNTIME_CLI_RANK_PARTS_H_
#define NEREID_RUNTIME_CLI_RANK_PARTS_H_

// What `nereid check` and `nereid plan` print of a plan made for N workers:
// each rank's part (plan/split_by_rank.h), what it holds and what it moves.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace nereid {

// "1.5 MiB"
std::string Bytes(int64_t n);

// One line per rank, predicted from its graph's shapes: nodes; trainable
// parameter bytes; state bytes (optimizer state, running statistics);
// activation bytes per sample; the bytes it hands its collectives and Sends per
// step (values without a batch dimension: gradients) and per sample (with
// one: activations); its ends of Send/Recv pairs. parts[r] is rank r's graph.
std::string RankPartsTable(const std::vector<std::unique_ptr<Graph>>& parts);

}  // namespace nereid

#endif  // NEREID_RUNTIME_CLI_RANK_PARTS_H_
