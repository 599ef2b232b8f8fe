// The directed ring: rank i always sends to i + 1.

#include "passes/gossip_topology.h"

namespace nereid {

NEREID_REGISTER_GOSSIP_TOPOLOGY(GossipTopology{"ring", "i + 1", [](int64_t) { return std::vector<int64_t>{1}; }});

}  // namespace nereid
