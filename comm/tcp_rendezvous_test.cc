// The TCP store (comm/tcp_store.h) on loopback: keys written once and read
// back; an authenticated client's malformed request closes only its own
// connection; three ranks meet
// through tcp:// and allreduce; a taken port and a missing server are errors
// naming the address, within their timeouts.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/gloo_status.h"
#include "comm/gloo_test_world.h"
#include "comm/rendezvous.h"
#include "comm/store_handshake.h"
#include "comm/tcp_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

int FreePort() { return testing::FreeLoopbackPort(); }

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

TEST(TcpStoreTest, KeysAreWrittenOnceAndReadBack) {
  const int port = FreePort();
  ASSERT_TRUE(ServeTcpStore("127.0.0.1", port, kToken).ok());
  ASSERT_TRUE(ServeTcpStore("127.0.0.1", port, kToken).ok());  // the same address again: the same server
  EXPECT_THAT(std::string(ServeTcpStore("127.0.0.1", port, "another-token-0123456789").message()),
              HasSubstr("already serves it for another run token"));
  auto a = TcpStoreClient::Connect("127.0.0.1", port, kToken, std::chrono::seconds(5));
  auto b = TcpStoreClient::Connect("127.0.0.1", port, kToken, std::chrono::seconds(5));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*b)->check({"k"}));
  (*a)->set("k", Bytes("value"));
  (*a)->set("empty", {});
  EXPECT_TRUE((*b)->check({"k", "empty"}));
  EXPECT_EQ((*b)->get("k"), Bytes("value"));
  EXPECT_TRUE((*b)->get("empty").empty());
  absl::Status again = CallGloo("set", [&] { (*b)->set("k", Bytes("other")); });
  EXPECT_THAT(std::string(again.message()), HasSubstr("'k' already exists"));
  absl::Status late = CallGloo("wait", [&] { (*b)->wait({"never"}, std::chrono::milliseconds(100)); });
  EXPECT_THAT(std::string(late.message()), HasSubstr("not set within 100ms"));

  // An authenticated client's request announcing a 4 GiB key: the server
  // closes that connection (allocating nothing) and keeps serving the others.
  const int fd = testing::DialLoopback(port);
  ASSERT_GE(fd, 0);
  std::string challenge(store_handshake::kChallengeBytes, '\0');
  ASSERT_EQ(recv(fd, challenge.data(), challenge.size(), MSG_WAITALL), static_cast<ssize_t>(challenge.size()));
  const std::string server_nonce = challenge.substr(store_handshake::kMagic.size());
  const std::string client_nonce(store_handshake::kNonceBytes, 'c');
  const std::string proof = store_handshake::Answer(kToken, server_nonce, client_nonce);
  ASSERT_EQ(send(fd, proof.data(), proof.size(), 0), static_cast<ssize_t>(proof.size()));
  std::string accept(store_handshake::kAcceptBytes, '\0');
  ASSERT_EQ(recv(fd, accept.data(), accept.size(), MSG_WAITALL), static_cast<ssize_t>(accept.size()));
  EXPECT_TRUE(store_handshake::AcceptIsValid(kToken, server_nonce, client_nonce, accept));
  const char request[] = {'G', '\xff', '\xff', '\xff', '\xff'};
  ASSERT_EQ(send(fd, request, sizeof(request), 0), static_cast<ssize_t>(sizeof(request)));
  char answer = 0;
  EXPECT_EQ(recv(fd, &answer, 1, 0), 0);  // closed, no answer
  close(fd);
  EXPECT_EQ((*a)->get("k"), Bytes("value"));
}

TEST(TcpStoreTest, ThreeRanksMeetAndAllReduce) {
  auto spec = ParseRendezvousSpec(absl::StrCat("tcp://127.0.0.1:", FreePort()), "tcp-test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto comms = testing::ConnectWorld(*spec, 3, absl::Seconds(20));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const absl::Status status = testing::AllOk(testing::RunOnRanks(3, [&](int r) -> absl::Status {
    std::vector<float> data(1000, static_cast<float>(r + 1));
    CollectiveOptions options;
    options.tag = 3;
    options.timeout = absl::Seconds(20);
    absl::Status s = (*comms)[r]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
    if (s.ok() && (data.front() != 6.0f || data.back() != 6.0f)) s = absl::InternalError("wrong sum");
    return s;
  }));
  EXPECT_TRUE(status.ok()) << status;
}

TEST(TcpStoreTest, ATakenPortAndAMissingServerAreNamed) {
  // Something else holds the port: rank 0 cannot serve there.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t n = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  const int taken = ntohs(a.sin_port);
  absl::Status s = ServeTcpStore("127.0.0.1", taken, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("cannot serve on 127.0.0.1:", taken)));
  close(fd);

  // Rank 1 of a run whose rank 0 never starts: a deadline, naming the store.
  auto spec = ParseRendezvousSpec(absl::StrCat("tcp://127.0.0.1:", FreePort()), "tcp-missing");
  ASSERT_TRUE(spec.ok());
  GlooConnectOptions options;
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto c = ConnectGloo(*spec, 1, 2, WorkerIdentity{"test", "plan", 2}, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("did it start?"));
}

}  // namespace
}  // namespace nereid
