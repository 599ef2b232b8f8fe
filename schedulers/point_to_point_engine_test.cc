// The point-to-point engine over a real Gloo world (ranks as threads): a
// transfer never waits behind another, so ranks that both receive first (or
// both send first) still meet; a missing peer ends in a timeout error, not a
// hang; the destructor waits for running transfers.

#include "schedulers/point_to_point_engine.h"

#include <future>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo_test_world.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// Submits work and waits for its status.
class Waiter {
 public:
  PointToPointChannel::Done done() {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    futures_.push_back(promise->get_future());
    return [promise](absl::Status s) { promise->set_value(std::move(s)); };
  }
  absl::Status Wait() {
    absl::Status first;
    for (auto& f : futures_) first.Update(f.get());
    return first;
  }

 private:
  std::vector<std::future<absl::Status>> futures_;
};

TEST(PointToPointEngineTest, RanksThatBothReceiveFirstStillMeet) {
  auto world = testing::ConnectWorld(testing::LocalFileSpec("p2p"), 2, absl::Seconds(30));
  ASSERT_TRUE(world.ok()) << world.status();
  std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int rank) -> absl::Status {
    PointToPointEngine engine((*world)[rank].get(), absl::Seconds(30));
    const int peer = 1 - rank;
    std::vector<float> in(1000, -1.0f), out(1000, static_cast<float>(rank + 1));
    CollectiveOptions o;
    o.timeout = absl::Seconds(30);
    // Receive first, then send: on one queue both ranks would wait forever.
    // Three rounds: the second and third reuse the first's two threads.
    for (int round = 0; round < 3; ++round) {
      Waiter w;
      o.tag = 7 + round;
      engine.Submit([&](Communicator& c) { return c.Recv(absl::MakeSpan(in), peer, o); }, w.done());
      engine.Submit([&](Communicator& c) { return c.Send(out, peer, o); }, w.done());
      absl::Status s = w.Wait();
      if (!s.ok()) return s;
      if (in.front() != static_cast<float>(peer + 1) || in.back() != static_cast<float>(peer + 1)) {
        return absl::InternalError(absl::StrCat("rank ", rank, " received ", in.front()));
      }
      while (engine.running() > 0) absl::SleepFor(absl::Milliseconds(1));
    }
    if (engine.threads() > 2) return absl::InternalError(absl::StrCat(engine.threads(), " threads for 2 at a time"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(testing::AllOk(statuses).ok()) << testing::AllOk(statuses);
}

TEST(PointToPointEngineTest, AReceiveNoPeerAnswersTimesOut) {
  auto world = testing::ConnectWorld(testing::LocalFileSpec("p2p-timeout"), 2, absl::Seconds(30));
  ASSERT_TRUE(world.ok()) << world.status();
  PointToPointEngine engine((*world)[0].get(), absl::Seconds(1));
  std::vector<float> in(4);
  CollectiveOptions o;
  o.timeout = absl::Seconds(1);
  Waiter w;
  engine.Submit([&](Communicator& c) { return c.Recv(absl::MakeSpan(in), 1, o); }, w.done());
  absl::Status s = w.Wait();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 1"));
}

// A rank that fails stops waiting for its peers at once: the abort signal
// ends a receive and a send no peer will answer, long before their timeout,
// and a transfer started after it ends at once too.
TEST(PointToPointEngineTest, TheAbortSignalEndsTransfersWaitingForPeers) {
  auto world = testing::ConnectWorld(testing::LocalFileSpec("p2p-abort"), 2, absl::Seconds(30));
  ASSERT_TRUE(world.ok()) << world.status();
  PointToPointEngine engine((*world)[0].get(), absl::Seconds(600));
  std::vector<float> in(4), out(1 << 20, 1.0f);  // a send larger than the socket buffers waits for its Recv
  CollectiveOptions o;
  o.timeout = absl::Seconds(600);
  o.abort = engine.abort_signal();
  Waiter w;
  engine.Submit([&](Communicator& c) { return c.Recv(absl::MakeSpan(in), 1, o); }, w.done());
  engine.Submit([&](Communicator& c) { return c.Send(out, 1, o); }, w.done());
  while (engine.running() < 2) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(50));  // into their waits
  engine.abort_signal()->Fire();
  absl::Status s = w.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("this rank is failing"));
  Waiter late;
  engine.Submit([&](Communicator& c) { return c.Recv(absl::MakeSpan(in), 1, o); }, late.done());
  EXPECT_FALSE(late.Wait().ok());
}

}  // namespace
}  // namespace nereid
