// The complete graph: every rank sends 1/n to every other each step (one
// group allreduce), so one step averages all models, as allreduce does.

#include "passes/gossip_topology.h"

namespace nereid {

NEREID_REGISTER_GOSSIP_TOPOLOGY(GossipTopology{"complete", "every rank", nullptr, /*all_to_all=*/true});

}  // namespace nereid
