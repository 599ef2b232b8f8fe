// SGP's time-varying directed exponential graph: at step t rank i sends to
// i + 2^(t mod log2 n), so after log2 n steps every rank has heard from all.

#include "passes/gossip_topology.h"

namespace nereid {
namespace {

std::vector<int64_t> ExponentialOffsets(int64_t world) {
  std::vector<int64_t> offsets;
  for (int64_t o = 1; o < world; o *= 2) offsets.push_back(o);
  return offsets;
}

}  // namespace

NEREID_REGISTER_GOSSIP_TOPOLOGY(GossipTopology{"exponential", "i + 2^(t mod log2 n)", ExponentialOffsets});

}  // namespace nereid
