// The caching allocator over the sim device: reuse on one stream, the
// record-use rule across streams, stats by hand-computed numbers, and giving
// memory back.

#include "device/caching_allocator.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_registry.h"
#include "device/test_gate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

class CachingAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("sim", {});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    s1_ = NewStream("s1");
    s2_ = NewStream("s2");
    allocator_ = std::make_unique<CachingAllocator>(device_.get());
  }

  std::unique_ptr<Stream> NewStream(const std::string& name) {
    absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream(name);
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? *std::move(stream) : nullptr;
  }

  DeviceBlock Allocate(size_t bytes, Stream* stream) {
    absl::StatusOr<DeviceBlock> block = allocator_->Allocate(bytes, stream);
    EXPECT_TRUE(block.ok()) << block.status();
    return block.ok() ? *block : DeviceBlock{};
  }

  // Destroyed in reverse: allocator, streams, device.
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> s1_, s2_;
  std::unique_ptr<CachingAllocator> allocator_;
};

TEST_F(CachingAllocatorTest, RoundsUpTo512Bytes) {
  EXPECT_EQ(*CachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(*CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(*CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(*CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(~size_t{0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CachingAllocatorTest, FreedBlockIsReusedByTheSameStream) {
  DeviceBlock a = Allocate(1000, s1_.get());
  EXPECT_EQ(a.size, 1024u);
  EXPECT_EQ(a.stream, s1_.get());
  ASSERT_TRUE(allocator_->Free(a).ok());
  DeviceBlock b = Allocate(900, s1_.get());
  EXPECT_EQ(b.ptr, a.ptr);
  const AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.allocations, 2);
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.bytes_reserved, 1024);
  EXPECT_TRUE(allocator_->Free(b).ok());
}

TEST_F(CachingAllocatorTest, AnotherStreamDoesNotTakeACachedBlock) {
  DeviceBlock a = Allocate(1000, s1_.get());
  ASSERT_TRUE(allocator_->Free(a).ok());
  DeviceBlock b = Allocate(1000, s2_.get());
  EXPECT_NE(b.ptr, a.ptr);
  EXPECT_EQ(allocator_->stats().cache_hits, 0);
  EXPECT_TRUE(allocator_->Free(b).ok());
}

TEST_F(CachingAllocatorTest, ASmallRequestDoesNotTakeABlockTwiceItsSize) {
  DeviceBlock big = Allocate(4096, s1_.get());
  ASSERT_TRUE(allocator_->Free(big).ok());
  DeviceBlock small = Allocate(2048, s1_.get());  // 4096 >= 2 * 2048: a new block
  EXPECT_NE(small.ptr, big.ptr);
  DeviceBlock medium = Allocate(2049, s1_.get());  // rounds to 2560: 4096 < 5120, reused
  EXPECT_EQ(medium.ptr, big.ptr);
  EXPECT_EQ(medium.size, 4096u);
  EXPECT_TRUE(allocator_->Free(small).ok());
  EXPECT_TRUE(allocator_->Free(medium).ok());
}

// s2 is held at a gate while it "uses" a block of s1's. After Free, s1 must
// not get the block back until s2's use has completed.
TEST_F(CachingAllocatorTest, BlockUsedOnAnotherStreamWaitsForThatStream) {
  TestGate gate;  // after the streams: opens before they are destroyed
  DeviceBlock a = Allocate(1024, s1_.get());
  ASSERT_TRUE(s2_->Launch("use_on_s2", gate.Hold()).ok());
  ASSERT_TRUE(allocator_->RecordUse(a, s2_.get()).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());

  DeviceBlock b = Allocate(1024, s1_.get());
  EXPECT_NE(b.ptr, a.ptr) << "reused while s2 may still be using it";
  AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.cache_hits, 0);
  EXPECT_EQ(stats.bytes_in_use, 1024);
  EXPECT_EQ(stats.bytes_reserved, 2048);  // the held block stays reserved

  gate.Open();
  ASSERT_TRUE(s2_->Synchronize().ok());
  DeviceBlock c = Allocate(1024, s1_.get());
  EXPECT_EQ(c.ptr, a.ptr) << "not reused once s2's use completed";
  EXPECT_EQ(allocator_->stats().cache_hits, 1);
  EXPECT_TRUE(allocator_->Free(b).ok());
  EXPECT_TRUE(allocator_->Free(c).ok());
}

TEST_F(CachingAllocatorTest, RecordUseOnTheOwningStreamHoldsNothingBack) {
  DeviceBlock a = Allocate(1024, s1_.get());
  ASSERT_TRUE(allocator_->RecordUse(a, s1_.get()).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());
  EXPECT_EQ(Allocate(1024, s1_.get()).ptr, a.ptr);
}

TEST_F(CachingAllocatorTest, StatsByHand) {
  DeviceBlock a = Allocate(1000, s1_.get());  // 1024
  DeviceBlock b = Allocate(3000, s1_.get());  // 3072
  AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_in_use, 4096);
  EXPECT_EQ(stats.bytes_reserved, 4096);
  EXPECT_EQ(stats.fragmentation, 0.0);

  ASSERT_TRUE(allocator_->Free(b).ok());
  stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_in_use, 1024);
  EXPECT_EQ(stats.bytes_reserved, 4096);
  EXPECT_THAT(stats.fragmentation, DoubleNear(0.75, 1e-12));  // 1 - 1024/4096

  DeviceBlock c = Allocate(2000, s1_.get());  // 2048 fits the cached 3072 (< 2 * 2048)
  EXPECT_EQ(c.ptr, b.ptr);
  EXPECT_EQ(c.size, 3072u);
  ASSERT_TRUE(allocator_->Free(c).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());
  DeviceBlock d = Allocate(100, s1_.get());  // 512: the cached 1024 and 3072 are both >= 2 * 512
  stats = allocator_->stats();
  EXPECT_EQ(stats.allocations, 4);
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.bytes_in_use, 512);
  EXPECT_EQ(stats.peak_bytes_in_use, 4096);
  EXPECT_EQ(stats.bytes_reserved, 4608);
  EXPECT_EQ(stats.peak_bytes_reserved, 4608);
  EXPECT_THAT(stats.fragmentation, DoubleNear(1.0 - 512.0 / 4608.0, 1e-12));

  ASSERT_TRUE(allocator_->EmptyCache().ok());
  stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_reserved, 512);
  EXPECT_EQ(stats.peak_bytes_reserved, 4608);
  EXPECT_EQ(stats.fragmentation, 0.0);
  EXPECT_TRUE(allocator_->Free(d).ok());
}

TEST_F(CachingAllocatorTest, EmptyCacheGivesMemoryBackToTheDevice) {
  DeviceBlock kept = Allocate(512, s1_.get());
  DeviceBlock cached = Allocate(4096, s1_.get());
  ASSERT_TRUE(allocator_->Free(cached).ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, 512 + 4096);
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, 512);
  // The device no longer knows the block: it was freed there.
  EXPECT_THAT(std::string(device_->FreeRaw(cached.ptr).message()), HasSubstr("not a live device block"));
  EXPECT_NE(Allocate(4096, s1_.get()).ptr, nullptr);
  EXPECT_EQ(allocator_->stats().cache_hits, 0);
  EXPECT_TRUE(allocator_->Free(kept).ok());
}

TEST_F(CachingAllocatorTest, EmptyCacheKeepsBlocksStillInUseElsewhere) {
  TestGate gate;
  DeviceBlock a = Allocate(1024, s1_.get());
  ASSERT_TRUE(s2_->Launch("use_on_s2", gate.Hold()).ok());
  ASSERT_TRUE(allocator_->RecordUse(a, s2_.get()).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, 1024) << "freed while s2 may be using it";
  gate.Open();
  ASSERT_TRUE(s2_->Synchronize().ok());
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, 0);
}

TEST_F(CachingAllocatorTest, RefusesBlocksItDoesNotHold) {
  DeviceBlock a = Allocate(512, s1_.get());
  ASSERT_TRUE(allocator_->Free(a).ok());
  absl::Status twice = allocator_->Free(a);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.message()), HasSubstr("not a live block"));
  EXPECT_EQ(allocator_->RecordUse(a, s2_.get()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator_->Allocate(512, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

// Threads allocating and freeing on their own streams: the counts add up
// (and TSan sees the one mutex).
TEST_F(CachingAllocatorTest, ConcurrentUseKeepsCountsExact) {
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(NewStream("t" + std::to_string(t)));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        absl::StatusOr<DeviceBlock> block = allocator_->Allocate(512 * (1 + i % 3), streams[t].get());
        ASSERT_TRUE(block.ok()) << block.status();
        ASSERT_TRUE(allocator_->Free(*block).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.allocations, kThreads * kRounds);
  EXPECT_EQ(stats.bytes_in_use, 0);
  // Per stream the sizes 512, 1024, 1536 cycle: none fits the cached ones
  // the first time round, and each finds its own block ever after.
  EXPECT_EQ(stats.allocations - stats.cache_hits, kThreads * 3);
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, 0);
}

}  // namespace
}  // namespace nereid
