// The "shm" communicator backend: ConnectShm (shm_communicator.h) behind the
// factory (communicator_factory.h), after the run's identity check. For ranks
// on one host; CPU tensors.

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/communicator_factory.h"
#include "comm/rendezvous.h"
#include "comm/shm_communicator.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> ConnectShmBackend(const CommunicatorSpec& spec) {
  ASSIGN_OR_RETURN(std::unique_ptr<RendezvousStore> store,
                   OpenRendezvous(spec.rendezvous, spec.rank, spec.world, spec.identity, spec.connect_timeout));
  return ConnectShm(*store, spec.rank, spec.world, spec.connect_timeout);
}

}  // namespace

NEREID_REGISTER_COMMUNICATOR("shm", ConnectShmBackend);

}  // namespace nereid
