// The run token (comm/run_token.h): HMAC-SHA256 against RFC 4231, where a
// token comes from and when a file is refused, which stores need one, and
// signed rendezvous values naming who lacks the token.

#include "comm/run_token.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

EnvGetter FakeEnv(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

std::string WriteTokenFile(const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::remove(path.c_str());
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

TEST(RunTokenTest, MacIsHmacSha256) {
  // RFC 4231, test case 2.
  EXPECT_EQ(absl::BytesToHexString(RunTokenMac("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_TRUE(MacsEqual("abc", "abc"));
  EXPECT_FALSE(MacsEqual("abc", "abd"));
  EXPECT_FALSE(MacsEqual("abc", "ab"));
}

TEST(RunTokenTest, NewTokensAreLongAndDiffer) {
  const std::string a = NewRunToken(), b = NewRunToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

TEST(RunTokenTest, FileWinsOverTheEnvironmentAndMustBePrivate) {
  const std::string good = WriteTokenFile("token_good", absl::StrCat(kToken, "\n"), 0600);
  auto token = ResolveRunToken(good, FakeEnv({{kRunTokenEnvVar, "from-the-environment-0123"}}));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kToken);  // the newline dropped

  const std::string open = WriteTokenFile("token_open", kToken, 0644);
  token = ResolveRunToken(open, FakeEnv({}));
  EXPECT_EQ(token.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(token.status().message()), HasSubstr("permissions 0644"));
  EXPECT_THAT(std::string(token.status().message()), HasSubstr("chmod 600"));

  const std::string short_one = WriteTokenFile("token_short", "abc", 0600);
  EXPECT_THAT(std::string(ResolveRunToken(short_one, FakeEnv({})).status().message()),
              HasSubstr("at least 16 are needed"));
  EXPECT_EQ(ResolveRunToken("/nonexistent/token", FakeEnv({})).status().code(), absl::StatusCode::kNotFound);

  token = ResolveRunToken("", FakeEnv({{kRunTokenEnvVar, "from-the-environment-0123"}}));
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(*token, "from-the-environment-0123");
  token = ResolveRunToken("", FakeEnv({}));
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(*token, "");
  EXPECT_THAT(std::string(ResolveRunToken("", FakeEnv({{kRunTokenEnvVar, "short"}})).status().message()),
              HasSubstr("NEREID_TOKEN holds a token of 5 characters"));
}

TEST(RunTokenTest, StoresOtherMachinesReachNeedATokenOrInsecure) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.8.9.10"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("node0"));
  EXPECT_FALSE(IsLoopbackHost("::"));

  auto spec = ParseRendezvousSpec("tcp://10.0.0.1:29500");
  ASSERT_TRUE(spec.ok());
  const absl::Status refused = CheckRendezvousToken(*spec, /*insecure=*/false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--token-file"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--insecure"));
  EXPECT_TRUE(CheckRendezvousToken(*spec, /*insecure=*/true).ok());
  spec->token = kToken;
  EXPECT_TRUE(CheckRendezvousToken(*spec, false).ok());
  for (const char* fine : {"tcp://127.0.0.1:29500", "redis://localhost:6379", "file:/tmp/x"}) {
    auto s = ParseRendezvousSpec(fine);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(CheckRendezvousToken(*s, false).ok()) << fine;
  }
  auto redis = ParseRendezvousSpec("redis://cache.example:6379");
  ASSERT_TRUE(redis.ok());
  EXPECT_FALSE(CheckRendezvousToken(*redis, false).ok());
}

TEST(RunTokenTest, SignedValuesNameWhoLacksTheToken) {
  const std::string sealed = SignValue(kToken, "nereid/run/ident/1", "payload");
  auto opened = OpenSignedValue(kToken, "nereid/run/ident/1", sealed, "rank 1", "rank 0");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, "payload");
  // Moved to another key (a replayed identity) or edited: refused.
  EXPECT_FALSE(OpenSignedValue(kToken, "nereid/run/ident/2", sealed, "rank 2", "rank 0").ok());
  std::string edited = sealed;
  edited[0] = 'P';
  EXPECT_FALSE(OpenSignedValue(kToken, "nereid/run/ident/1", edited, "rank 1", "rank 0").ok());

  const std::string unsigned_value = SignValue("", "k", "payload");
  auto no_token = OpenSignedValue(kToken, "k", unsigned_value, "rank 1", "rank 0");
  EXPECT_EQ(no_token.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(no_token.status().message()), HasSubstr("rank 1 has no run token and rank 0 has one"));
  auto reader_lacks = OpenSignedValue("", "k", SignValue(kToken, "k", "payload"), "rank 0", "rank 1");
  EXPECT_THAT(std::string(reader_lacks.status().message()), HasSubstr("rank 0 has a run token and rank 1 has none"));
  auto other = OpenSignedValue("another-token-0123456789", "k", SignValue(kToken, "k", "payload"), "rank 1", "rank 0");
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("rank 1 holds another token than rank 0"));
  auto both_none = OpenSignedValue("", "k", unsigned_value, "rank 1", "rank 0");
  ASSERT_TRUE(both_none.ok());
  EXPECT_EQ(*both_none, "payload");
  EXPECT_FALSE(OpenSignedValue(kToken, "k", "no signature at all", "rank 1", "rank 0").ok());
}

}  // namespace
}  // namespace nereid
