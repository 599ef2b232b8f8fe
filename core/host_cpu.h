#ifndef NEREID_CORE_HOST_CPU_H_
#define NEREID_CORE_HOST_CPU_H_

// How busy this machine's cores are, from Linux's /proc/stat: what the timing
// model needs to charge communication for the CPU it takes from computation
// (`nereid bench allreduce` measures it around its allreduces). The counters
// are the whole machine's, network namespaces included, so the kernel's work
// for the traffic (TCP, the bridge, the shaping, softirqs) is counted with the
// processes'.

#include <string>

#include "absl/status/statusor.h"

namespace nereid {

// Seconds the machine's cores have spent busy since boot, summed over cores:
// user + nice + system + irq + softirq. Not idle or iowait, and not steal: the
// time a virtual machine's hypervisor gave its cores to others is nobody's
// work here (it can reach a quarter of a core on a cloud VM).
absl::StatusOr<double> HostBusyCpuSeconds();
// The same from a /proc/stat text (`label` names it in errors).
absl::StatusOr<double> ParseBusyCpuSeconds(const std::string& proc_stat, const std::string& label,
                                           long ticks_per_second);

// Cores online.
int HostCores();

// An identifier of this boot of this machine (/proc/sys/kernel/random/boot_id),
// the same in every namespace of it: ranks that report the same one share the
// machine's cores. Empty when unreadable.
std::string HostBootId();

}  // namespace nereid

#endif  // NEREID_CORE_HOST_CPU_H_
