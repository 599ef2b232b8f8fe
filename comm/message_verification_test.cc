// The message verifier over real Gloo (two ranks as threads): clean traffic
// passes unchanged; a transfer or a collective result changed by the fault
// injector underneath is DataLoss naming what and where.

#include "comm/message_verification.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/fault_injection.h"
#include "comm/gloo_test_world.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// Two verified ranks over Gloo, with `faults` injected underneath.
std::vector<std::unique_ptr<Communicator>> VerifiedWorld(const std::string& label, const std::string& faults) {
  auto comms = testing::ConnectWorld(testing::LocalFileSpec(label), 2, absl::Seconds(30));
  EXPECT_TRUE(comms.ok()) << comms.status();
  if (!comms.ok()) return {};
  absl::StatusOr<FaultPlan> plan = ParseFaultPlan(faults);
  EXPECT_TRUE(plan.ok()) << plan.status();
  for (auto& c : *comms) c = WithMessageVerification(WithFaults(std::move(c), *plan));
  return std::move(*comms);
}

CollectiveOptions Options(uint32_t tag) {
  CollectiveOptions options;
  options.tag = tag;
  options.timeout = absl::Seconds(20);
  return options;
}

TEST(MessageVerificationTest, CleanTrafficPassesUnchanged) {
  std::vector<std::unique_ptr<Communicator>> comms = VerifiedWorld("clean", "");
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_EQ(comms[0]->backend(), "verified(gloo/tcp)");
  std::vector<std::vector<float>> reduced(2), received(2), gathered(2);
  const absl::Status status = testing::AllOk(testing::RunOnRanks(2, [&](int r) -> absl::Status {
    Communicator& c = *comms[static_cast<size_t>(r)];
    reduced[r].assign(5, static_cast<float>(r + 1));
    if (absl::Status s = c.AllReduce(absl::MakeSpan(reduced[r]), ReduceOp::kSum, Options(1)); !s.ok()) return s;
    // Two messages on one tag each way: the sequence numbers advance.
    received[r].assign(4, 0.0f);
    for (int i = 0; i < 2; ++i) {
      const std::vector<float> mine(4, static_cast<float>(10 * r + i));
      if (r == 0) {
        if (absl::Status s = c.Send(mine, 1, Options(2)); !s.ok()) return s;
      } else {
        if (absl::Status s = c.Recv(absl::MakeSpan(received[r]), 0, Options(2)); !s.ok()) return s;
      }
    }
    gathered[r].assign(2, 0.0f);
    const float one = static_cast<float>(r);
    return c.AllGather(absl::MakeConstSpan(&one, 1), absl::MakeSpan(gathered[r]), Options(3));
  }));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(reduced[0], std::vector<float>(5, 3.0f));
  EXPECT_EQ(reduced[1], std::vector<float>(5, 3.0f));
  EXPECT_EQ(received[1], std::vector<float>(4, 1.0f));  // the second message
  EXPECT_EQ(gathered[0], (std::vector<float>{0.0f, 1.0f}));
}

TEST(MessageVerificationTest, ChangedMessageIsDataLossNamingPeerAndTag) {
  // Rank 1's first call (its Recv) has element 0 changed after it arrives.
  std::vector<std::unique_ptr<Communicator>> comms = VerifiedWorld("changed", "rank=1:corrupt@1");
  ASSERT_EQ(comms.size(), 2u);
  const std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int r) -> absl::Status {
    std::vector<float> data(8, 2.5f);
    if (r == 0) return comms[0]->Send(data, 1, Options(7));
    return comms[1]->Recv(absl::MakeSpan(data), 0, Options(7));
  });
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDataLoss) << statuses[1];
  EXPECT_THAT(statuses[1].message(), HasSubstr("rank 1 recv from rank 0 (tag 7, 8 floats)"));
  EXPECT_THAT(statuses[1].message(), HasSubstr("changed in transit"));
}

// Under the sender's verifier: moves every Send to Gloo tag `retag` (a
// message arriving where another tag's Recv waits) or sends it twice.
class Miswire final : public Communicator {
 public:
  Miswire(std::unique_ptr<Communicator> inner, int retag, bool twice)
      : inner_(std::move(inner)), retag_(retag), twice_(twice) {}
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend(); }
  absl::Status AllReduce(absl::Span<float> d, ReduceOp op, const CollectiveOptions& o) override {
    return inner_->AllReduce(d, op, o);
  }
  absl::Status ReduceScatter(absl::Span<const float> d, absl::Span<float> out, ReduceOp op,
                             const CollectiveOptions& o) override {
    return inner_->ReduceScatter(d, out, op, o);
  }
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out, const CollectiveOptions& o) override {
    return inner_->AllGather(in, out, o);
  }
  absl::Status Broadcast(absl::Span<float> d, int root, const CollectiveOptions& o) override {
    return inner_->Broadcast(d, root, o);
  }
  absl::Status Send(absl::Span<const float> d, int peer, const CollectiveOptions& o) override {
    CollectiveOptions moved = o;
    if (retag_ >= 0) moved.tag = static_cast<uint32_t>(retag_);
    if (twice_) {
      if (absl::Status s = inner_->Send(d, peer, moved); !s.ok()) return s;
    }
    return inner_->Send(d, peer, moved);
  }
  absl::Status Recv(absl::Span<float> d, int peer, const CollectiveOptions& o) override {
    return inner_->Recv(d, peer, o);
  }
  absl::Status Barrier(const CollectiveOptions& o) override { return inner_->Barrier(o); }
  TrafficCounters traffic() const override { return inner_->traffic(); }

 private:
  std::unique_ptr<Communicator> inner_;
  int retag_;
  bool twice_;
};

// Rank 0 sends one message of tag 4 (through `miswire`'s knobs); rank 1
// receives `receives` messages on tag `recv_tag`. Rank 1's statuses.
absl::Status MiswiredTransfer(const std::string& label, int retag, bool twice, uint32_t recv_tag, int receives) {
  auto raw = testing::ConnectWorld(testing::LocalFileSpec(label), 2, absl::Seconds(30));
  if (!raw.ok()) return raw.status();
  VerifyingCommunicator sender(std::make_unique<Miswire>(std::move((*raw)[0]), retag, twice));
  VerifyingCommunicator receiver(std::move((*raw)[1]));
  const std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int r) -> absl::Status {
    std::vector<float> data(3, 1.0f);
    if (r == 0) return sender.Send(data, 1, Options(4));
    for (int i = 0; i < receives; ++i) {
      if (absl::Status s = receiver.Recv(absl::MakeSpan(data), 0, Options(recv_tag)); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  return statuses[1];
}

TEST(MessageVerificationTest, MisdirectedMessageIsDataLoss) {
  const absl::Status status = MiswiredTransfer("retag", /*retag=*/5, /*twice=*/false, /*recv_tag=*/5, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("the message was sent with tag 4 (misdirected)"));
}

TEST(MessageVerificationTest, DuplicatedMessageIsDataLoss) {
  const absl::Status status = MiswiredTransfer("twice", /*retag=*/-1, /*twice=*/true, /*recv_tag=*/4, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("message 0 of this tag arrived where message 1 was due"));
}

TEST(MessageVerificationTest, CollectiveResultThatDiffersIsDataLossOnEveryRank) {
  // Rank 0's allreduce result has element 0 changed: the ranks' CRCs differ.
  std::vector<std::unique_ptr<Communicator>> comms = VerifiedWorld("differ", "rank=0:corrupt@1");
  ASSERT_EQ(comms.size(), 2u);
  const std::vector<absl::Status> statuses = testing::RunOnRanks(2, [&](int r) -> absl::Status {
    std::vector<float> data(10, 1.0f);
    return comms[static_cast<size_t>(r)]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Options(9));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDataLoss) << statuses[r];
    EXPECT_THAT(statuses[r].message(),
                HasSubstr("allreduce (tag 9, 10 floats) ended with different values on rank(s) 1 than on rank 0"));
  }
}

}  // namespace
}  // namespace nereid
