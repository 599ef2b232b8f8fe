// Rendezvous through a real Redis server: the test starts redis-server on a
// free loopback port (skipping if it is not installed), runs a world-3
// allreduce through it, and kills the server.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo_test_world.h"
#include "comm/rendezvous.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

constexpr char kRedisServer[] = "/usr/bin/redis-server";

// A port the kernel just handed out (racy, but good enough for a test).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

class RedisRendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kRedisServer, X_OK) != 0) GTEST_SKIP() << kRedisServer << " not installed; skipping the Redis test";
    port_ = FreePort();
    ASSERT_GT(port_, 0);
    const std::string port = absl::StrCat(port_);
    const std::string dir = testing::TestTempDir();
    std::vector<std::string> args = {kRedisServer, "--port",     port, "--bind",     "127.0.0.1", "--save",
                                     "",           "--appendonly", "no", "--dir",      dir,         "--loglevel",
                                     "warning"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    ASSERT_GE(pid_, 0) << "fork failed";
    if (pid_ == 0) {
      // The server dies with the test process, even if the test crashes.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execv(kRedisServer, argv.data());
      _exit(127);
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!Accepts(port_)) {
      ASSERT_LT(absl::Now(), deadline) << "redis-server did not start on port " << port_;
      int status = 0;
      ASSERT_EQ(waitpid(pid_, &status, WNOHANG), 0) << "redis-server exited";
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  pid_t pid_ = -1;
  int port_ = -1;
};

TEST_F(RedisRendezvousTest, World3AllReduce) {
  auto spec = ParseRendezvousSpec(absl::StrCat("redis://127.0.0.1:", port_), "redis-test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto comms = testing::ConnectWorld(*spec, 3, absl::Seconds(20));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const absl::Status status = testing::AllOk(testing::RunOnRanks(3, [&](int r) -> absl::Status {
    std::vector<float> data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(r * 1000 + i);
    CollectiveOptions options;
    options.tag = 11;
    options.timeout = absl::Seconds(20);
    absl::Status s = (*comms)[r]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
    for (size_t i = 0; s.ok() && i < data.size(); ++i) {
      if (data[i] != static_cast<float>(3000 + 3 * i)) s = absl::InternalError(absl::StrCat("element ", i));
    }
    return s;
  }));
  EXPECT_TRUE(status.ok()) << status;

  // The run's keys expire (an hour after the ranks met), so a shared store
  // does not fill up.
  {
    const timeval t = {2, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, t);
    ASSERT_TRUE(c != nullptr && c->err == 0);
    auto* ttl = static_cast<redisReply*>(redisCommand(c, "TTL %s", "nereid/redis-test/ident/0"));
    ASSERT_NE(ttl, nullptr);
    EXPECT_EQ(ttl->type, REDIS_REPLY_INTEGER);
    EXPECT_GT(ttl->integer, 3000) << "TTL of ident/0";
    EXPECT_LE(ttl->integer, 3600);
    freeReplyObject(ttl);
    redisFree(c);
  }

  // The same run id again in the same server: the keys are taken.
  GlooConnectOptions options;
  options.connect_timeout = absl::Seconds(2);
  auto again = ConnectGloo(*spec, 0, 3, WorkerIdentity{"test", "plan", 3}, options);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
}

TEST_F(RedisRendezvousTest, MissingRankTimesOutNamingStore) {
  auto spec = ParseRendezvousSpec(absl::StrCat("redis://127.0.0.1:", port_), "redis-missing");
  ASSERT_TRUE(spec.ok()) << spec.status();
  GlooConnectOptions options;
  options.connect_timeout = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  auto c = ConnectGloo(*spec, 0, 2, WorkerIdentity{"test", "plan", 2}, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_NE(std::string(c.status().message()).find(absl::StrCat("redis://127.0.0.1:", port_)), std::string::npos)
      << c.status();
}

}  // namespace
}  // namespace nereid
