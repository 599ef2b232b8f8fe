#include "comm/rendezvous_spec.h"

#include <string>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(RendezvousSpecTest, ParsesFile) {
  auto spec = ParseRendezvousSpec("file:/tmp/rdv", "run7");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, RendezvousSpec::Kind::kFile);
  EXPECT_EQ(spec->path, "/tmp/rdv");
  EXPECT_EQ(spec->run_id, "run7");
  EXPECT_EQ(spec->ToString(), "file:/tmp/rdv");

  auto url = ParseRendezvousSpec("file:///tmp/rdv");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->path, "/tmp/rdv");
  EXPECT_EQ(url->run_id, "default");

  auto relative = ParseRendezvousSpec("file:rdv/dir");
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_EQ(relative->path, "rdv/dir");
}

TEST(RendezvousSpecTest, ParsesRedis) {
  auto spec = ParseRendezvousSpec("redis://10.0.0.5:7000", "r");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, RendezvousSpec::Kind::kRedis);
  EXPECT_EQ(spec->host, "10.0.0.5");
  EXPECT_EQ(spec->port, 7000);
  EXPECT_EQ(spec->ToString(), "redis://10.0.0.5:7000");

  auto default_port = ParseRendezvousSpec("redis://store.local");
  ASSERT_TRUE(default_port.ok()) << default_port.status();
  EXPECT_EQ(default_port->host, "store.local");
  EXPECT_EQ(default_port->port, 6379);

  auto v6 = ParseRendezvousSpec("redis://[::1]:6380/");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 6380);
  EXPECT_EQ(v6->ToString(), "redis://[::1]:6380");
}

TEST(RendezvousSpecTest, ParsesTcp) {
  auto spec = ParseRendezvousSpec("tcp://10.0.0.5:29500", "r");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, RendezvousSpec::Kind::kTcp);
  EXPECT_EQ(spec->host, "10.0.0.5");
  EXPECT_EQ(spec->port, 29500);
  EXPECT_EQ(spec->ToString(), "tcp://10.0.0.5:29500");
}

void ExpectError(const std::string& spec, const std::string& fragment, const std::string& run_id = "r") {
  auto parsed = ParseRendezvousSpec(spec, run_id);
  ASSERT_FALSE(parsed.ok()) << spec;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(parsed.status().message()).find(fragment), std::string::npos)
      << spec << ": " << parsed.status();
}

TEST(RendezvousSpecTest, RejectsBadSpecs) {
  ExpectError("", "empty");
  ExpectError("udp://host:1", "unknown scheme");
  ExpectError("tcp://host", "the port is required");
  ExpectError("tcp://host:70000", "not a number in 1..65535");
  ExpectError("/tmp/dir", "unknown scheme");
  ExpectError("file:", "empty directory");
  ExpectError("redis://", "empty host");
  ExpectError("redis://:6379", "empty host");
  ExpectError("redis://host:", "empty port");
  ExpectError("redis://host:abc", "port 'abc'");
  ExpectError("redis://host:70000", "1..65535");
  ExpectError("redis://host:0", "1..65535");
  ExpectError("redis://::1:6379", "brackets");
  ExpectError("redis://[::1", "']'");
  ExpectError("redis://host:1/db", "port");
  ExpectError("file:/tmp/x", "run id is empty", "");
  ExpectError("file:/tmp/x", "contains '/'", "a/b");
}

}  // namespace
}  // namespace nereid
