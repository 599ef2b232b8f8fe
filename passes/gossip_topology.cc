#include "passes/gossip_topology.h"

#include "absl/strings/str_cat.h"

namespace nereid {

GossipTopologyRegistry& GossipTopologyRegistry::Global() {
  static auto* registry = new GossipTopologyRegistry;
  return *registry;
}

absl::Status GossipTopologyRegistry::Register(GossipTopology topology) {
  if (topology.name.empty() || (!topology.offsets && !topology.all_to_all)) {
    return absl::InvalidArgumentError("a gossip topology needs a name and its offsets");
  }
  if (topologies_.count(topology.name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("gossip topology ", topology.name, " registered twice"));
  }
  std::string name = topology.name;
  topologies_.emplace(std::move(name), std::move(topology));
  return absl::OkStatus();
}

const GossipTopology* GossipTopologyRegistry::Find(const std::string& name) const {
  auto it = topologies_.find(name);
  return it == topologies_.end() ? nullptr : &it->second;
}

std::vector<std::string> GossipTopologyRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : topologies_) names.push_back(name);
  return names;
}

}  // namespace nereid
