// ConnectGloo: the identity check before Gloo connects, bounded waits for
// missing ranks, and run ids that keep runs sharing a store apart.

#include "comm/rendezvous.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo_test_world.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::ConnectWorld;
using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;

GlooConnectOptions Timeout(absl::Duration timeout) {
  GlooConnectOptions options;
  options.connect_timeout = timeout;
  return options;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(RendezvousTest, ConnectsAndAllReduces) {
  auto comms = ConnectWorld(LocalFileSpec("connect"), 4, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const absl::Status status = testing::AllOk(RunOnRanks(4, [&](int r) -> absl::Status {
    std::vector<float> data(3, static_cast<float>(r));
    CollectiveOptions options;
    absl::Status s = (*comms)[r]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
    if (s.ok() && data[2] != 6.0f) s = absl::InternalError("wrong sum");
    return s;
  }));
  EXPECT_TRUE(status.ok()) << status;
}

// Both ranks get a clear error, and neither hangs.
TEST(RendezvousTest, PlanFingerprintMismatchFailsBothRanks) {
  const RendezvousSpec spec = LocalFileSpec("fingerprint");
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunOnRanks(2, [&](int r) -> absl::Status {
    const WorkerIdentity identity{"1.0", r == 0 ? "99ff0012" : "1234abcd", 2};
    return ConnectGloo(spec, r, 2, identity, Timeout(absl::Seconds(10))).status();
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "rank 1 has plan fingerprint 1234abcd but rank 0 has 99ff0012"))
        << statuses[r];
  }
}

TEST(RendezvousTest, WorldSizeMismatchFailsBothRanks) {
  const RendezvousSpec spec = LocalFileSpec("world-size");
  const std::vector<absl::Status> statuses = RunOnRanks(2, [&](int r) -> absl::Status {
    const int world = r == 0 ? 2 : 4;
    return ConnectGloo(spec, r, world, WorkerIdentity{"1.0", "plan", world}, Timeout(absl::Seconds(10))).status();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "rank 1 has world size 4 but rank 0 has 2")) << statuses[r];
  }
}

// Rank 2 differs from rank 0; rank 1 agrees with rank 0 but hears of it.
TEST(RendezvousTest, MismatchIsRelayedToAgreeingRanks) {
  const RendezvousSpec spec = LocalFileSpec("relay");
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunOnRanks(3, [&](int r) -> absl::Status {
    const WorkerIdentity identity{r == 2 ? "2.0" : "1.0", "plan", 3};
    return ConnectGloo(spec, r, 3, identity, Timeout(absl::Seconds(10))).status();
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "rank 2 has nereid version 2.0 but rank 0 has 1.0")) << statuses[r];
  }
  EXPECT_TRUE(Contains(statuses[1], "rank 0 reports")) << statuses[1];
}

TEST(RendezvousTest, MissingRankIsDeadlineExceededNamingIt) {
  const RendezvousSpec spec = LocalFileSpec("missing");
  const absl::Duration timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  // World 3, but rank 2 never comes.
  const std::vector<absl::Status> statuses = RunOnRanks(2, [&](int r) -> absl::Status {
    return ConnectGloo(spec, r, 3, WorkerIdentity{"1.0", "plan", 3}, Timeout(timeout)).status();
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "rank 2 of 3 never published its identity")) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "file:" + spec.path)) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], spec.run_id)) << statuses[r];
  }
}

TEST(RendezvousTest, MissingRankZero) {
  const RendezvousSpec spec = LocalFileSpec("no-root");
  const absl::Time start = absl::Now();
  const absl::Status status =
      ConnectGloo(spec, 1, 2, WorkerIdentity{"1.0", "plan", 2}, Timeout(absl::Milliseconds(300))).status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(Contains(status, "rank 0 never published its identity")) << status;
}

TEST(RendezvousTest, ReusedRunIdIsAlreadyExists) {
  const RendezvousSpec spec = LocalFileSpec("reused");
  auto first = ConnectGloo(spec, 0, 1, WorkerIdentity{"1.0", "plan", 1}, Timeout(absl::Seconds(5)));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ConnectGloo(spec, 0, 1, WorkerIdentity{"1.0", "plan", 1}, Timeout(absl::Seconds(5)));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists) << second.status();
  EXPECT_TRUE(Contains(second.status(), "run id reused")) << second.status();
}

// Two runs with different plans in one store directory at the same time.
TEST(RendezvousTest, RunsSharingAStoreDoNotMix) {
  const RendezvousSpec a = LocalFileSpec("shared");
  RendezvousSpec b = a;
  b.run_id += "-other";
  const std::vector<absl::Status> statuses = RunOnRanks(4, [&](int i) -> absl::Status {
    const bool in_a = i < 2;
    const WorkerIdentity identity{"1.0", in_a ? "plan-a" : "plan-b", 2};
    auto c = ConnectGloo(in_a ? a : b, i % 2, 2, identity, Timeout(absl::Seconds(10)));
    if (!c.ok()) return c.status();
    std::vector<float> data(5, static_cast<float>(i));
    absl::Status s = (*c)->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, CollectiveOptions());
    const float want = in_a ? 0.0f + 1.0f : 2.0f + 3.0f;
    if (s.ok() && data[4] != want) s = absl::InternalError("runs mixed");
    return s;
  });
  EXPECT_TRUE(testing::AllOk(statuses).ok()) << testing::AllOk(statuses);
}

TEST(RendezvousTest, ArgumentErrors) {
  const RendezvousSpec spec = LocalFileSpec("args");
  EXPECT_EQ(ConnectGloo(spec, 2, 2, {}, Timeout(absl::Seconds(1))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectGloo(spec, 0, 2, WorkerIdentity{"1.0", "p", 3}, Timeout(absl::Seconds(1))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectGloo(spec, 0, 1, {}, Timeout(absl::ZeroDuration())).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousTest, UnreachableRedisIsUnavailable) {
  RendezvousSpec spec;
  spec.kind = RendezvousSpec::Kind::kRedis;
  spec.host = "127.0.0.1";
  spec.port = 1;  // nothing listens on port 1
  spec.run_id = "unreachable";
  const absl::Status status = ConnectGloo(spec, 0, 1, {}, Timeout(absl::Seconds(1))).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(Contains(status, "redis://127.0.0.1:1")) << status;
}

}  // namespace
}  // namespace nereid
