// A stopped or vanished peer ends a Gloo call in DeadlineExceeded or
// Unavailable naming the operation, tag, rank and peer, within about twice
// the timeout, and leaves the communicator failing fast afterwards.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/gloo_test_world.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::ConnectWorld;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;

constexpr absl::Duration kTimeout = absl::Milliseconds(500);

CollectiveOptions Options(uint32_t tag) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = kTimeout;
  return o;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// World 2; rank 1 never calls AllReduce.
TEST(GlooFailureTest, AllReduceWithSilentPeerTimesOut) {
  auto comms = ConnectWorld(LocalFileSpec("silent-peer"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  absl::Notification done;
  absl::Status status;
  absl::Duration elapsed;
  RunOnRanks(2, [&](int r) -> absl::Status {
    if (r == 1) {
      done.WaitForNotification();
      return absl::OkStatus();
    }
    std::vector<float> data(1000, 1.0f);
    const absl::Time start = absl::Now();
    status = (*comms)[0]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(7));
    elapsed = absl::Now() - start;
    done.Notify();
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(Contains(status, "allreduce")) << status;
  EXPECT_TRUE(Contains(status, "tag 7")) << status;
  EXPECT_TRUE(Contains(status, "rank 0 of 2")) << status;
  EXPECT_TRUE(Contains(status, "ring neighbours 1 and 1")) << status;
  EXPECT_GE(elapsed, kTimeout * 0.9);
  EXPECT_LT(elapsed, kTimeout * 2) << "took " << elapsed;

  // The context is closed now: later calls fail at once.
  std::vector<float> more(10, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status again = (*comms)[0]->AllReduce(absl::MakeSpan(more), ReduceOp::kSum, Options(8));
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_TRUE(Contains(again, "earlier failure")) << again;
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
}

TEST(GlooFailureTest, RecvFromSilentPeerTimesOutNamingThePeer) {
  auto comms = ConnectWorld(LocalFileSpec("silent-sender"), 3, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<float> data(10);
  const absl::Time start = absl::Now();
  const absl::Status status = (*comms)[1]->Recv(absl::MakeSpan(data), 2, Options(3));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(Contains(status, "recv (tag 3, rank 1 of 3, peer 2)")) << status;
  EXPECT_LT(elapsed, kTimeout * 2) << "took " << elapsed;
}

TEST(GlooFailureTest, SendToPeerThatNeverReceivesTimesOut) {
  auto comms = ConnectWorld(LocalFileSpec("never-receives"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<float> data(10, 2.0f);
  const absl::Status status = (*comms)[0]->Send(data, 1, Options(4));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(Contains(status, "send (tag 4, rank 0 of 2, peer 1)")) << status;
}

// A peer whose communicator is gone (its sockets closed, as when its process
// dies) is a connection error, not a timeout.
TEST(GlooFailureTest, VanishedPeerIsUnavailable) {
  auto comms = ConnectWorld(LocalFileSpec("vanished-peer"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  (*comms)[1].reset();
  absl::SleepFor(absl::Milliseconds(100));
  std::vector<float> data(1000, 1.0f);
  CollectiveOptions options = Options(9);
  options.timeout = absl::Seconds(20);
  const absl::Time start = absl::Now();
  const absl::Status status = (*comms)[0]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(Contains(status, "allreduce (tag 9, rank 0 of 2")) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace nereid
