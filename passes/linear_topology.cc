// SGP's time-varying directed linear graph: at step t rank i sends to
// i + 1 + (t mod (n-1)), so every rank sends to every other once in n-1
// steps (the exponential graph reaches them all in log2 n, through others).

#include "passes/gossip_topology.h"

namespace nereid {
namespace {

std::vector<int64_t> LinearOffsets(int64_t world) {
  std::vector<int64_t> offsets;
  for (int64_t o = 1; o < world; ++o) offsets.push_back(o);
  return offsets;
}

}  // namespace

NEREID_REGISTER_GOSSIP_TOPOLOGY(GossipTopology{"linear", "i + 1 + (t mod (n-1))", LinearOffsets});

}  // namespace nereid
