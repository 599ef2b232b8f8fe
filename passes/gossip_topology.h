#ifndef NEREID_PASSES_GOSSIP_TOPOLOGY_H_
#define NEREID_PASSES_GOSSIP_TOPOLOGY_H_

// The communication graphs the gossip pass (SGP) mixes over. A topology
// gives, for n ranks, the out-neighbour offsets the steps cycle through: at
// step t rank i sends to i + offsets[t mod size]. Every offset is a shift, so
// every rank receives as many messages as it sends and push-sum weights stay
// 1. A topology whose every rank reaches every other each step says
// `all_to_all` (one group allreduce instead of shifts).
//
// Adding one is one new file, NAME_topology.cc, ending in
//   NEREID_REGISTER_GOSSIP_TOPOLOGY(GossipTopology{"name", "summary", Offsets});

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/registration.h"

namespace nereid {

struct GossipTopology {
  std::string name;
  std::string summary;
  std::function<std::vector<int64_t>(int64_t world)> offsets;
  bool all_to_all = false;
};

class GossipTopologyRegistry {
 public:
  static GossipTopologyRegistry& Global();
  absl::Status Register(GossipTopology topology);
  const GossipTopology* Find(const std::string& name) const;
  std::vector<std::string> Names() const;  // sorted

 private:
  std::map<std::string, GossipTopology> topologies_;
};

}  // namespace nereid

#define NEREID_REGISTER_GOSSIP_TOPOLOGY(...) NEREID_REGISTER(::nereid::GossipTopologyRegistry, __VA_ARGS__)

#endif  // NEREID_PASSES_GOSSIP_TOPOLOGY_H_
