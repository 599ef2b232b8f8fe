#include "comm/worker_identity.h"

#include <string>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(WorkerIdentityTest, RoundTrips) {
  const WorkerIdentity id{"0.3.1\nweird=\"chars\"", "99ff0012", 4, "batch=32;seed=0"};
  auto back = DecodeIdentity(EncodeIdentity(id));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->nereid_version, id.nereid_version);
  EXPECT_EQ(back->plan_fingerprint, id.plan_fingerprint);
  EXPECT_EQ(back->world_size, 4);
  EXPECT_EQ(back->settings, "batch=32;seed=0");
}

TEST(WorkerIdentityTest, RejectsGarbage) {
  EXPECT_FALSE(DecodeIdentity("").ok());
  EXPECT_FALSE(DecodeIdentity("hello").ok());
  EXPECT_FALSE(DecodeIdentity("nereid-identity v2\nversion=a\nplan=b\nworld=x\nsettings=\n").ok());
  EXPECT_FALSE(DecodeIdentity("nereid-identity v2\nversion=a\nplan=b\nworld=2\n").ok());
  EXPECT_FALSE(DecodeIdentity("nereid-identity v1\nversion=a\nplan=b\nworld=2\n").ok());  // an older build's
  EXPECT_TRUE(DecodeIdentity("nereid-identity v2\nversion=a\nplan=b\nworld=2\nsettings=\n").ok());
}

TEST(WorkerIdentityTest, NamesEveryDifference) {
  const WorkerIdentity a{"1.0", "1234abcd", 4};
  EXPECT_TRUE(CompareIdentities(a, 1, a, 0).ok());

  const WorkerIdentity b{"1.0", "99ff0012", 2};
  const absl::Status s = CompareIdentities(a, 1, b, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "rank 1 has plan fingerprint 1234abcd but rank 0 has 99ff0012; "
            "rank 1 has world size 4 but rank 0 has 2");

  const WorkerIdentity c{"", "1234abcd", 4};
  EXPECT_EQ(CompareIdentities(c, 2, a, 0).message(), "rank 2 has nereid version (empty) but rank 0 has 1.0");

  // Settings are named one by one, with both values.
  const WorkerIdentity d{"1.0", "1234abcd", 4, "batch=32;max_steps=20;test_limit=0"};
  const WorkerIdentity e{"1.0", "1234abcd", 4, "batch=32;max_steps=50;test_limit=100"};
  EXPECT_EQ(CompareIdentities(d, 1, e, 0).message(),
            "rank 1 has max_steps=20 but rank 0 has max_steps=50; rank 1 has test_limit=0 but rank 0 has "
            "test_limit=100");
}

}  // namespace
}  // namespace nereid
