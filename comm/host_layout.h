#ifndef NEREID_COMM_HOST_LAYOUT_H_
#define NEREID_COMM_HOST_LAYOUT_H_

// Which ranks of a run share a host, i.e. can reach each other through shared
// memory. Each rank names its host with HostKey(); the hierarchical backend
// (hierarchical_communicator.h) exchanges the keys at rendezvous and groups
// the ranks with HostLayout.

#include <string>
#include <vector>

#include "comm/launch_env.h"

namespace nereid {

// NEREID_HOST_ID when set (an operator's or a test's override; ranks with the
// same id must share /dev/shm). Otherwise the machine's hostname and boot id,
// /dev/shm's device and inode, the network namespace and the effective user:
// ranks in separate containers with their own /dev/shm, in separate network
// namespaces (bench/netem/cluster.sh's emulated machines) or of different
// users (who cannot open each other's segments) count as separate hosts.
std::string HostKey(const EnvGetter& env);

// The ranks grouped by host key: hosts in the order of their lowest rank,
// each host's ranks ascending; its first rank leads it.
struct HostLayout {
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of;      // world rank -> index in `hosts`
  std::vector<int> local_index;  // world rank -> index in its host's list

  static HostLayout FromKeys(const std::vector<std::string>& key_of_rank);
  // The first rank of every host, in host order.
  std::vector<int> Leaders() const;
  // "2 hosts: 0,1 | 2,3".
  std::string Describe() const;
};

}  // namespace nereid

#endif  // NEREID_COMM_HOST_LAYOUT_H_
