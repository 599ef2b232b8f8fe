// The fault-injecting wrapper around a recording fake (delay, drop, kill,
// corrupt, call numbering) and around real Gloo (a dropped call makes the
// peer time out; a corrupted one changes one output element).

#include "comm/fault_injection.h"

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo_test_world.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

// Records the calls that reach it; AllReduce writes 7 everywhere.
class FakeCommunicator final : public Communicator {
 public:
  explicit FakeCommunicator(int rank = 0) : rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return 2; }
  std::string backend() const override { return "fake"; }
  absl::Status AllReduce(absl::Span<float> data, ReduceOp, const CollectiveOptions&) override {
    ops.push_back("allreduce");
    for (float& x : data) x = 7.0f;
    return absl::OkStatus();
  }
  absl::Status ReduceScatter(absl::Span<const float>, absl::Span<float>, ReduceOp,
                             const CollectiveOptions&) override {
    ops.push_back("reduce_scatter");
    return absl::OkStatus();
  }
  absl::Status AllGather(absl::Span<const float>, absl::Span<float>, const CollectiveOptions&) override {
    ops.push_back("allgather");
    return absl::OkStatus();
  }
  absl::Status Broadcast(absl::Span<float>, int, const CollectiveOptions&) override {
    ops.push_back("broadcast");
    return absl::OkStatus();
  }
  absl::Status Send(absl::Span<const float>, int, const CollectiveOptions&) override {
    ops.push_back("send");
    return absl::OkStatus();
  }
  absl::Status Recv(absl::Span<float> data, int, const CollectiveOptions&) override {
    ops.push_back("recv");
    for (float& x : data) x = 0.0f;
    return absl::OkStatus();
  }
  absl::Status Barrier(const CollectiveOptions&) override {
    ops.push_back("barrier");
    return absl::OkStatus();
  }
  TrafficCounters traffic() const override { return {}; }

  std::vector<std::string> ops;

 private:
  int rank_;
};

FaultPlan Plan(const std::string& text) {
  auto plan = ParseFaultPlan(text);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : FaultPlan{};
}

TEST(FaultInjectionTest, DropSkipsTheInnerCall) {
  auto fake = std::make_unique<FakeCommunicator>();
  FakeCommunicator* raw = fake.get();
  FaultInjectingCommunicator c(std::move(fake), Plan("drop@2"));
  EXPECT_EQ(c.backend(), "fault(fake)");
  std::vector<float> data(3, 1.0f);
  EXPECT_TRUE(c.Barrier({}).ok());
  EXPECT_TRUE(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, {}).ok());  // call 2: dropped
  EXPECT_EQ(data[0], 1.0f);
  EXPECT_TRUE(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, {}).ok());
  EXPECT_EQ(data[0], 7.0f);
  EXPECT_EQ(raw->ops, (std::vector<std::string>{"barrier", "allreduce"}));
  EXPECT_EQ(c.calls(), 3);
}

TEST(FaultInjectionTest, CorruptChangesElementZeroAfterTheCall) {
  auto fake = std::make_unique<FakeCommunicator>();
  FaultInjectingCommunicator c(std::move(fake), Plan("corrupt@1,corrupt@2"));
  std::vector<float> data(3, 1.0f);
  EXPECT_TRUE(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, {}).ok());
  EXPECT_EQ(data, (std::vector<float>{-7.0f, 7.0f, 7.0f}));
  EXPECT_TRUE(c.Recv(absl::MakeSpan(data), 1, {}).ok());
  EXPECT_EQ(data, (std::vector<float>{1.0f, 0.0f, 0.0f}));
  EXPECT_EQ(CorruptValue(2.5f), -2.5f);
  EXPECT_EQ(CorruptValue(0.0f), 1.0f);
}

TEST(FaultInjectionTest, DelayEveryCallOrOne) {
  FaultInjectingCommunicator every(std::make_unique<FakeCommunicator>(), Plan("delay=30ms"));
  absl::Time start = absl::Now();
  EXPECT_TRUE(every.Barrier({}).ok());
  EXPECT_TRUE(every.Barrier({}).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(60));

  FaultInjectingCommunicator one(std::make_unique<FakeCommunicator>(), Plan("delay=200ms@2"));
  start = absl::Now();
  EXPECT_TRUE(one.Barrier({}).ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(150));
  start = absl::Now();
  EXPECT_TRUE(one.Barrier({}).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
}

TEST(FaultInjectionTest, RankPrefixSelectsTheRank) {
  const FaultPlan plan = Plan("rank=1:drop@1");
  std::unique_ptr<Communicator> rank0 = WithFaults(std::make_unique<FakeCommunicator>(0), plan);
  EXPECT_EQ(rank0->backend(), "fake");  // nothing for rank 0: not wrapped
  std::unique_ptr<Communicator> rank1 = WithFaults(std::make_unique<FakeCommunicator>(1), plan);
  EXPECT_EQ(rank1->backend(), "fault(fake)");
}

TEST(FaultInjectionDeathTest, KillRaisesSigkill) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  FaultInjectingCommunicator c(std::make_unique<FakeCommunicator>(), Plan("kill@2"));
  EXPECT_TRUE(c.Barrier({}).ok());
  EXPECT_EXIT(c.Barrier({}).IgnoreError(), ::testing::KilledBySignal(SIGKILL),
              "SIGKILL on rank 0 at call 2 \\(barrier\\)");
}

// World 2 over Gloo: rank 1 drops its first allreduce, so rank 0 times out.
TEST(FaultInjectionGlooTest, DroppedCallMakesThePeerTimeOut) {
  auto comms = testing::ConnectWorld(testing::LocalFileSpec("drop"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const FaultPlan plan = Plan("rank=1:drop@1");
  for (auto& c : *comms) c = WithFaults(std::move(c), plan);
  absl::Notification rank0_done;
  CollectiveOptions options;
  options.tag = 1;
  options.timeout = absl::Milliseconds(500);
  const std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int r) -> absl::Status {
    std::vector<float> data(100, 1.0f);
    absl::Status s = (*comms)[r]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, options);
    if (r == 0) {
      rank0_done.Notify();
    } else {
      rank0_done.WaitForNotification();  // keep rank 1's sockets open meanwhile
    }
    return s;
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
}

// World 2 over Gloo: rank 0 corrupts the result of its first allreduce.
TEST(FaultInjectionGlooTest, CorruptedCallChangesOneElementOnOneRank) {
  auto comms = testing::ConnectWorld(testing::LocalFileSpec("corrupt"), 2, absl::Seconds(30));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const FaultPlan plan = Plan("rank=0:corrupt@1");
  for (auto& c : *comms) c = WithFaults(std::move(c), plan);
  std::vector<std::vector<float>> results(2);
  const absl::Status status = testing::AllOk(testing::RunOnRanks(2, [&](int r) -> absl::Status {
    results[r].assign(10, static_cast<float>(r + 1));
    CollectiveOptions options;
    options.timeout = absl::Seconds(20);
    return (*comms)[r]->AllReduce(absl::MakeSpan(results[r]), ReduceOp::kSum, options);
  }));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(results[1], std::vector<float>(10, 3.0f));
  std::vector<float> corrupted(10, 3.0f);
  corrupted[0] = -3.0f;
  EXPECT_EQ(results[0], corrupted);
}

}  // namespace
}  // namespace nereid
