#ifndef NEREID_COMM_GLOO_TEST_WORLD_H_
#define NEREID_COMM_GLOO_TEST_WORLD_H_

// Test support: the ranks of a world as threads of one process, each with its
// own Gloo context over loopback TCP, meeting in a FileStore under
// $TEST_TMPDIR (or /tmp) with a run id no other call uses.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/rendezvous_spec.h"

namespace nereid {
namespace testing {

std::string TestTempDir();

// A loopback TCP port nothing listens on now (bound to 0 and released).
int FreeLoopbackPort();

// A raw TCP connection to `port` on loopback, or -1.
int DialLoopback(int port);

// file:<TestTempDir()>/rendezvous with run id "<label>-<pid>-<counter>".
RendezvousSpec LocalFileSpec(absl::string_view label);

// Runs fn(rank) on `world` threads at once; the statuses in rank order.
std::vector<absl::Status> RunOnRanks(int world, const std::function<absl::Status(int rank)>& fn);

// OK if every status is, else the first error prefixed with its rank.
absl::Status AllOk(const std::vector<absl::Status>& statuses);

// Connects `world` ranks through `spec` with ConnectGloo (identity "test" /
// "plan" / world).
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> ConnectWorld(const RendezvousSpec& spec, int world,
                                                                        absl::Duration connect_timeout);

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_COMM_GLOO_TEST_WORLD_H_
