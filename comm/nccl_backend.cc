// The "nccl" communicator backend: ConnectNccl (nccl_communicator.h) behind
// the factory (communicator_factory.h), on CommunicatorSpec::device. Built
// only under --config=cuda. NCCL communicators take device buffers only.

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/communicator_factory.h"
#include "comm/nccl_communicator.h"

namespace nereid {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNcclBackend(const CommunicatorSpec& spec) {
  return ConnectNccl(spec.rendezvous, spec.rank, spec.world, spec.device, spec.identity, spec.connect_timeout);
}

}  // namespace

NEREID_REGISTER_COMMUNICATOR("nccl", ConnectNcclBackend);

}  // namespace nereid
