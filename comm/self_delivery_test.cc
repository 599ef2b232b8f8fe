#include "comm/self_delivery.h"

#include <thread>
#include <vector>

#include "comm/abort_signal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// Rank 1 of 3; records the transfers it is asked for (none may reach it for
// rank 1 itself).
class RecordingCommunicator final : public Communicator {
 public:
  int rank() const override { return 1; }
  int world() const override { return 3; }
  std::string backend() const override { return "recording"; }
  absl::Status AllReduce(absl::Span<float>, ReduceOp, const CollectiveOptions&) override { return Unused(); }
  absl::Status ReduceScatter(absl::Span<const float>, absl::Span<float>, ReduceOp, const CollectiveOptions&) override {
    return Unused();
  }
  absl::Status AllGather(absl::Span<const float>, absl::Span<float>, const CollectiveOptions&) override {
    return Unused();
  }
  absl::Status Broadcast(absl::Span<float>, int, const CollectiveOptions&) override { return Unused(); }
  absl::Status Barrier(const CollectiveOptions&) override { return Unused(); }
  absl::Status Send(absl::Span<const float>, int peer, const CollectiveOptions&) override {
    peers.push_back(peer);
    return absl::OkStatus();
  }
  absl::Status Recv(absl::Span<float> data, int peer, const CollectiveOptions&) override {
    peers.push_back(peer);
    for (float& x : data) x = 7;
    return absl::OkStatus();
  }
  TrafficCounters traffic() const override { return {}; }
  std::vector<int> peers;

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not in this test"); }
};

CollectiveOptions Tag(uint32_t tag, absl::Duration timeout = absl::Seconds(5)) {
  CollectiveOptions o;
  o.tag = tag;
  o.timeout = timeout;
  return o;
}

TEST(SelfDeliveryTest, ARankReceivesWhatItSentItselfByTagInOrder) {
  auto recording = std::make_unique<RecordingCommunicator>();
  RecordingCommunicator* inner = recording.get();
  std::unique_ptr<Communicator> c = WithSelfDelivery(std::move(recording));
  EXPECT_EQ(c->backend(), "recording");
  const std::vector<float> a = {1, 2}, b = {3, 4}, other = {5, 6};
  ASSERT_TRUE(c->Send(a, 1, Tag(9)).ok());
  ASSERT_TRUE(c->Send(other, 1, Tag(4)).ok());
  ASSERT_TRUE(c->Send(b, 1, Tag(9)).ok());
  std::vector<float> got(2);
  ASSERT_TRUE(c->Recv(absl::MakeSpan(got), 1, Tag(9)).ok());
  EXPECT_EQ(got, a);
  ASSERT_TRUE(c->Recv(absl::MakeSpan(got), 1, Tag(9)).ok());
  EXPECT_EQ(got, b);
  ASSERT_TRUE(c->Recv(absl::MakeSpan(got), 1, Tag(4)).ok());
  EXPECT_EQ(got, other);
  EXPECT_TRUE(inner->peers.empty());
  // Other ranks go to the inner communicator.
  ASSERT_TRUE(c->Send(a, 2, Tag(1)).ok());
  ASSERT_TRUE(c->Recv(absl::MakeSpan(got), 0, Tag(1)).ok());
  EXPECT_EQ(inner->peers, (std::vector<int>{2, 0}));
  EXPECT_EQ(got, (std::vector<float>{7, 7}));
}

TEST(SelfDeliveryTest, ARecvWaitsForItsSendOnAnotherThread) {
  std::unique_ptr<Communicator> c = WithSelfDelivery(std::make_unique<RecordingCommunicator>());
  std::vector<float> got(3);
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    const std::vector<float> v = {1, 2, 3};
    EXPECT_TRUE(c->Send(v, 1, Tag(3)).ok());
  });
  EXPECT_TRUE(c->Recv(absl::MakeSpan(got), 1, Tag(3)).ok());
  sender.join();
  EXPECT_EQ(got, (std::vector<float>{1, 2, 3}));
}

TEST(SelfDeliveryTest, WrongSizesTimeoutsAndAbortsAreErrors) {
  std::unique_ptr<Communicator> c = WithSelfDelivery(std::make_unique<RecordingCommunicator>());
  const std::vector<float> two = {1, 2};
  ASSERT_TRUE(c->Send(two, 1, Tag(5)).ok());
  std::vector<float> three(3);
  absl::Status s = c->Recv(absl::MakeSpan(three), 1, Tag(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("2 elements sent, 3 expected"));
  s = c->Recv(absl::MakeSpan(three), 1, Tag(6, absl::Milliseconds(30)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tag 6"));
  AbortSignal abort;
  CollectiveOptions o = Tag(7, absl::Seconds(30));
  o.abort = &abort;
  std::thread firing([&] {
    absl::SleepFor(absl::Milliseconds(30));
    abort.Fire();
  });
  s = c->Recv(absl::MakeSpan(three), 1, o);
  firing.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace nereid
