// The TCP store against strangers (comm/tcp_store.h), on loopback only:
// a process without the run's token, or with another, is refused and the
// store says why; a store without the token is not trusted by a client that
// has it; idle connections are dropped after their deadline; 2,000 idle or
// half-sent connections neither stall a run of two ranks nor grow this
// process by more than 64 MiB; and a rank without the token is refused on
// both sides of the rendezvous, by the TCP store and by the signed
// identities of a file store.

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo_test_world.h"
#include "comm/rendezvous.h"
#include "comm/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
constexpr char kOtherToken[] = "fedcba9876543210fedcba9876543210";

int FreePort() { return testing::FreeLoopbackPort(); }

int Dial(int port) { return testing::DialLoopback(port); }

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(TcpStoreSecurityTest, StrangersAreRefusedAndTheStoreSaysWhy) {
  const int port = FreePort();
  ASSERT_TRUE(ServeTcpStore("127.0.0.1", port, kToken).ok());
  auto none = TcpStoreClient::Connect("127.0.0.1", port, "", std::chrono::seconds(5));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("the run has a token and this process has none"));
  auto other = TcpStoreClient::Connect("127.0.0.1", port, kOtherToken, std::chrono::seconds(5));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("this process's token is not the run's"));
  // 49 bytes of nonsense where the answer belongs: refused with 'R'.
  const int fd = Dial(port);
  ASSERT_GE(fd, 0);
  const std::string junk(49, 'x');
  ASSERT_EQ(send(fd, junk.data(), junk.size(), 0), 49);
  std::string reply(21, '\0');
  ASSERT_EQ(recv(fd, reply.data(), reply.size(), MSG_WAITALL), 21);  // the challenge, then 'R'
  EXPECT_EQ(reply.substr(0, 4), "NRD1");
  EXPECT_EQ(reply[20], 'R');
  close(fd);
  auto good = TcpStoreClient::Connect("127.0.0.1", port, kToken, std::chrono::seconds(5));
  ASSERT_TRUE(good.ok()) << good.status();
  const std::string report = TcpStoreDropReport("127.0.0.1", port);
  EXPECT_THAT(report, HasSubstr("1 connection from 127.0.0.1: no token"));
  EXPECT_THAT(report, HasSubstr("1 connection from 127.0.0.1: wrong token"));
  EXPECT_THAT(report, HasSubstr("1 connection from 127.0.0.1: not a Nereid client"));
}

TEST(TcpStoreSecurityTest, AClientWithATokenDoesNotTrustAStoreWithout) {
  const int port = FreePort();
  ASSERT_TRUE(ServeTcpStore("127.0.0.1", port, "").ok());
  auto client = TcpStoreClient::Connect("127.0.0.1", port, kToken, std::chrono::seconds(5));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("or rank 0 has none"));
  EXPECT_TRUE(TcpStoreClient::Connect("127.0.0.1", port, "", std::chrono::seconds(5)).ok());
}

TEST(TcpStoreSecurityTest, SilentConnectionsAreDroppedAfterFiveSeconds) {
  const int port = FreePort();
  ASSERT_TRUE(ServeTcpStore("127.0.0.1", port, kToken).ok());
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(Dial(port));
  const auto start = std::chrono::steady_clock::now();
  for (int fd : idle) {
    ASSERT_GE(fd, 0);
    char buffer[64];
    ssize_t n = 0;
    // The challenge, then the end of the connection (bounded: the test's
    // own timeout stops a hang).
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    }
    EXPECT_EQ(n, 0);
    close(fd);
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 4.5);
  EXPECT_THAT(TcpStoreDropReport("127.0.0.1", port), HasSubstr("3 connections from 127.0.0.1: no token (idle"));
}

// The flood: 2,000 connections, half idle, half sending 20 bytes of
// an answer and then nothing, held open while two ranks meet, connect Gloo
// and allreduce through the same store.
TEST(TcpStoreSecurityTest, AFloodDoesNotStallARun) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < 4500) GTEST_SKIP() << "needs 4500 descriptors, the hard limit is " << limit.rlim_max;
  limit.rlim_cur = std::max<rlim_t>(limit.rlim_cur, 4500);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);

  const int port = FreePort();
  ASSERT_TRUE(ServeTcpStore("127.0.0.1", port, kToken).ok());
  const int64_t before = ResidentBytes();
  std::vector<int> flood;
  for (int i = 0; i < 2000; ++i) {
    const int fd = Dial(port);
    ASSERT_GE(fd, 0) << "connection " << i;
    if (i % 2 == 1) {
      const std::string half(20, 'T');
      send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    }
    flood.push_back(fd);
  }
  auto spec = ParseRendezvousSpec(absl::StrCat("tcp://127.0.0.1:", port), "flooded");
  ASSERT_TRUE(spec.ok());
  spec->token = kToken;
  auto comms = testing::ConnectWorld(*spec, 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const absl::Status reduced = testing::AllOk(testing::RunOnRanks(2, [&](int r) -> absl::Status {
    std::vector<float> data(1 << 16, static_cast<float>(r + 1));
    CollectiveOptions options;
    options.tag = 5;
    options.timeout = absl::Seconds(30);
    absl::Status s = (*comms)[r]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
    if (s.ok() && data.front() != 3.0f) s = absl::InternalError("wrong sum");
    return s;
  }));
  EXPECT_TRUE(reduced.ok()) << reduced;
  const int64_t grown = ResidentBytes() - before;
  EXPECT_LE(grown, int64_t{64} << 20) << "resident memory grew by " << grown << " bytes";
  EXPECT_THAT(TcpStoreDropReport("127.0.0.1", port), HasSubstr("connections from 127.0.0.1: too many connections from one address"));
  for (int fd : flood) close(fd);
}

// A rank started without the token: refused at the TCP store itself, and
// rank 0's deadline names the drop.
TEST(TcpStoreSecurityTest, ARankWithoutTheTokenCannotJoinThroughTcp) {
  auto spec = ParseRendezvousSpec(absl::StrCat("tcp://127.0.0.1:", FreePort()), "tokenless");
  ASSERT_TRUE(spec.ok());
  std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int rank) -> absl::Status {
    RendezvousSpec mine = *spec;
    mine.token = rank == 0 ? kToken : "";
    GlooConnectOptions options;
    options.connect_timeout = absl::Seconds(2);
    return ConnectGloo(mine, rank, 2, WorkerIdentity{"test", "plan", 2}, options).status();
  });
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kPermissionDenied) << statuses[1];
  EXPECT_THAT(std::string(statuses[1].message()), HasSubstr("the run has a token and this process has none"));
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("rank 1 of 2 never published its identity"));
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("(the store dropped: 1 connection from 127.0.0.1: no token"));
}

// Through a file store (no connection to refuse), the signed identities
// refuse a rank without the token, or with another, naming both sides.
TEST(TcpStoreSecurityTest, SignedIdentitiesRefuseARankWithoutTheToken) {
  for (const char* rank1_token : {"", kOtherToken}) {
    RendezvousSpec spec = testing::LocalFileSpec(absl::StrCat("signed", rank1_token[0] == 0 ? "-none" : "-other"));
    std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int rank) -> absl::Status {
      RendezvousSpec mine = spec;
      mine.token = rank == 0 ? kToken : rank1_token;
      GlooConnectOptions options;
      options.connect_timeout = absl::Seconds(10);
      return ConnectGloo(mine, rank, 2, WorkerIdentity{"test", "plan", 2}, options).status();
    });
    const bool none = rank1_token[0] == 0;
    EXPECT_EQ(statuses[0].code(), absl::StatusCode::kFailedPrecondition) << statuses[0];
    EXPECT_THAT(std::string(statuses[0].message()),
                HasSubstr(none ? "rank 1 has no run token and rank 0 has one" : "rank 1 holds another token"));
    EXPECT_FALSE(statuses[1].ok());
    EXPECT_THAT(std::string(statuses[1].message()),
                HasSubstr(none ? "rank 0 has a run token and rank 1 has none" : "rank 0 holds another token"));
  }
}

}  // namespace
}  // namespace nereid
