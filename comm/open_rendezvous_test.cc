// OpenRendezvous: the store opening and identity check of ConnectGloo without
// Gloo's connect, plus the key exchange other backends (NCCL) build on.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo_test_world.h"
#include "comm/rendezvous.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::nereid::testing::LocalFileSpec;
using ::nereid::testing::RunOnRanks;

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(OpenRendezvousTest, RankZeroPublishesAndOthersRead) {
  const RendezvousSpec spec = LocalFileSpec("open-exchange");
  std::vector<std::string> seen(3);
  const absl::Status status = testing::AllOk(RunOnRanks(3, [&](int r) -> absl::Status {
    absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
        OpenRendezvous(spec, r, 3, WorkerIdentity{"1.0", "plan", 3}, absl::Seconds(10));
    if (!store.ok()) return store.status();
    if (r == 0) {
      absl::SleepFor(absl::Milliseconds(50));
      seen[0] = "\x01 binary\n";
      return (*store)->Set("backend/id", seen[0]);
    }
    absl::StatusOr<std::string> value = (*store)->WaitAndGet("backend/id", absl::Seconds(10));
    if (!value.ok()) return value.status();
    seen[r] = *value;
    return absl::OkStatus();
  }));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen[1], seen[0]);
  EXPECT_EQ(seen[2], seen[0]);
}

TEST(OpenRendezvousTest, MissingKeyIsDeadlineExceeded) {
  auto store = OpenRendezvous(LocalFileSpec("open-missing"), 0, 1, WorkerIdentity{"1.0", "plan", 0},
                              absl::Seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::string> value = (*store)->WaitAndGet("never", absl::Milliseconds(200));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded) << value.status();
  EXPECT_TRUE(Contains(value.status(), "key never did not appear within 200ms")) << value.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ((*store)->Set("once", "a").code(), absl::StatusCode::kOk);
  EXPECT_EQ((*store)->Set("once", "b").code(), absl::StatusCode::kAlreadyExists);
}

TEST(OpenRendezvousTest, IdentityMismatchAndMissingRank) {
  const RendezvousSpec spec = LocalFileSpec("open-mismatch");
  const std::vector<absl::Status> statuses = RunOnRanks(2, [&](int r) -> absl::Status {
    return OpenRendezvous(spec, r, 2, WorkerIdentity{"1.0", r == 0 ? "aaaa" : "bbbb", 2}, absl::Seconds(10))
        .status();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition) << statuses[r];
    EXPECT_TRUE(Contains(statuses[r], "rank 1 has plan fingerprint bbbb but rank 0 has aaaa")) << statuses[r];
  }
  const absl::Status alone =
      OpenRendezvous(LocalFileSpec("open-alone"), 0, 2, WorkerIdentity{"1.0", "plan", 2}, absl::Milliseconds(300))
          .status();
  EXPECT_EQ(alone.code(), absl::StatusCode::kDeadlineExceeded) << alone;
  EXPECT_TRUE(Contains(alone, "rank 1 of 2 never published its identity")) << alone;
  EXPECT_EQ(OpenRendezvous(LocalFileSpec("open-bad"), 2, 2, WorkerIdentity{}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nereid
