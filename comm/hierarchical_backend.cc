// The "hierarchical" communicator backend (hierarchical_communicator.h):
// shared memory within a host, Gloo across hosts.

#include "comm/communicator_factory.h"
#include "comm/hierarchical_communicator.h"

namespace nereid {

NEREID_REGISTER_COMMUNICATOR("hierarchical", ConnectHierarchical);

}  // namespace nereid
