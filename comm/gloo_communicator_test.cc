// What only the raw Gloo communicator (ConnectGloo, without the factory's
// wrappers) shows: its name, rank and world, and that it makes no transfers
// to its own rank (CreateCommunicator's self-delivery wrapper adds those).
//
// Collectives, point-to-point transfers, the barrier, 16-bit wires,
// concurrent calls with distinct tags, traffic against the formulas, the
// argument checks and faults are checked for Gloo as for every backend in
// communicator_conformance_test.cc; Gloo's failure messages in
// gloo_failure_test.cc.

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "comm/gloo_test_world.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::ConnectWorld;
using ::nereid::testing::LocalFileSpec;

TEST(GlooCommunicatorTest, NamesItselfAndRefusesTransfersToItsOwnRank) {
  auto comms = ConnectWorld(LocalFileSpec("gloo-raw"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  Communicator& c = *(*comms)[0];
  EXPECT_EQ(c.backend(), "gloo/tcp");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.world(), 2);
  CollectiveOptions options;
  options.tag = 1;
  options.timeout = absl::Seconds(30);
  std::vector<float> a(4);
  const absl::Status send = c.Send(a, 0, options);
  EXPECT_EQ(send.code(), absl::StatusCode::kInvalidArgument) << send;
  const absl::Status recv = c.Recv(absl::MakeSpan(a), 0, options);
  EXPECT_EQ(recv.code(), absl::StatusCode::kInvalidArgument) << recv;
  EXPECT_EQ(c.traffic().calls, 0);
}

}  // namespace
}  // namespace nereid
