// The "gloo" communicator backend: ConnectGloo (rendezvous.h) behind the
// factory (communicator_factory.h). Gloo over TCP, for CPU tensors.

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/communicator_factory.h"
#include "comm/gloo_communicator.h"
#include "comm/rendezvous.h"

namespace nereid {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGlooBackend(const CommunicatorSpec& spec) {
  GlooConnectOptions options;
  options.hostname = spec.hostname;
  options.connect_timeout = spec.connect_timeout;
  return ConnectGloo(spec.rendezvous, spec.rank, spec.world, spec.identity, options);
}

}  // namespace

NEREID_REGISTER_COMMUNICATOR("gloo", ConnectGlooBackend);

}  // namespace nereid
