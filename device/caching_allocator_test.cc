// The caching allocator over the sim device: reuse on one stream, splitting
// and merging, the record-use rule across streams, stats by hand-computed
// numbers, and giving memory back.

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

constexpr size_t kMiB = size_t{1} << 20;
constexpr int64_t kSmallSegment = CachingAllocator::kSmallSegment;

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
  EXPECT_EQ(stats.bytes_reserved, kSmallSegment);
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

// A large cached block serves small requests by splitting; freed pieces
// merge back, so the segment serves a large request again.
TEST_F(CachingAllocatorTest, SmallRequestsSplitACachedBlockAndMergeBack) {
  DeviceBlock big = Allocate(4096, s1_.get());
  ASSERT_TRUE(allocator_->Free(big).ok());
  DeviceBlock first = Allocate(1024, s1_.get());
  DeviceBlock second = Allocate(1000, s1_.get());
  DeviceBlock third = Allocate(1024, s1_.get());
  EXPECT_EQ(first.ptr, big.ptr);
  EXPECT_EQ(first.size, 1024u);
  EXPECT_EQ(second.ptr, static_cast<char*>(big.ptr) + 1024);
  EXPECT_EQ(third.ptr, static_cast<char*>(big.ptr) + 2048);
  EXPECT_EQ(allocator_->stats().bytes_reserved, kSmallSegment) << "no new memory while the segment has room";
  // The middle piece freed last joins both neighbours: one block again.
  ASSERT_TRUE(allocator_->Free(first).ok());
  ASSERT_TRUE(allocator_->Free(third).ok());
  ASSERT_TRUE(allocator_->Free(second).ok());
  DeviceBlock whole = Allocate(4096, s1_.get());
  EXPECT_EQ(whole.ptr, big.ptr);
  EXPECT_EQ(whole.size, 4096u);
  const AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_reserved, kSmallSegment);
  EXPECT_EQ(stats.cache_hits, 4);
  EXPECT_TRUE(allocator_->Free(whole).ok());
}

// Small requests share segments of their own; a large request gets a
// segment of its size, and segments never merge.
TEST_F(CachingAllocatorTest, SmallRequestsShareASegmentAndSegmentsDoNotMerge) {
  DeviceBlock small1 = Allocate(1000, s1_.get());
  DeviceBlock small2 = Allocate(1000, s1_.get());
  EXPECT_EQ(small2.ptr, static_cast<char*>(small1.ptr) + 1024);
  EXPECT_EQ(allocator_->stats().bytes_reserved, kSmallSegment);
  DeviceBlock a = Allocate(2 * kMiB, s1_.get());
  DeviceBlock b = Allocate(2 * kMiB, s1_.get());  // a segment of its own, whatever its address
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->Free(b).ok());
  DeviceBlock two = Allocate(4 * kMiB, s1_.get());
  EXPECT_NE(two.ptr, a.ptr);
  EXPECT_NE(two.ptr, b.ptr);
  EXPECT_EQ(allocator_->stats().bytes_reserved, kSmallSegment + 8 * kMiB);
  for (const DeviceBlock& block : {small1, small2, two}) EXPECT_TRUE(allocator_->Free(block).ok());
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
  EXPECT_EQ(stats.cache_hits, 1);  // the rest of a's segment
  EXPECT_EQ(stats.bytes_in_use, 1024);
  EXPECT_EQ(stats.bytes_reserved, kSmallSegment);  // the held block stays reserved

  gate.Open();
  ASSERT_TRUE(s2_->Synchronize().ok());
  DeviceBlock c = Allocate(1024, s1_.get());
  EXPECT_EQ(c.ptr, a.ptr) << "not reused once s2's use completed";
  EXPECT_EQ(allocator_->stats().cache_hits, 2);
  EXPECT_TRUE(allocator_->Free(b).ok());
  EXPECT_TRUE(allocator_->Free(c).ok());
}

TEST_F(CachingAllocatorTest, RecordUseOnTheOwningStreamHoldsNothingBack) {
  DeviceBlock a = Allocate(1024, s1_.get());
  ASSERT_TRUE(allocator_->RecordUse(a, s1_.get()).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());
  EXPECT_EQ(Allocate(1024, s1_.get()).ptr, a.ptr);
}

// Large requests (over kSmallSize), in MiB: a large block splits only when
// the rest is itself large.
TEST_F(CachingAllocatorTest, StatsByHand) {
  const int64_t M = kMiB;
  DeviceBlock a = Allocate(2 * M, s1_.get());  // segment A
  DeviceBlock b = Allocate(6 * M, s1_.get());  // segment B
  AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_in_use, 8 * M);
  EXPECT_EQ(stats.bytes_reserved, 8 * M);
  EXPECT_EQ(stats.fragmentation, 0.0);

  ASSERT_TRUE(allocator_->Free(b).ok());
  stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_in_use, 2 * M);
  EXPECT_THAT(stats.fragmentation, DoubleNear(0.75, 1e-12));  // 1 - 2/8

  DeviceBlock c = Allocate(4 * M, s1_.get());  // from B's 6, 2 left cached
  EXPECT_EQ(c.ptr, b.ptr);
  EXPECT_EQ(c.size, 4u * kMiB);
  ASSERT_TRUE(allocator_->Free(c).ok());  // B whole again
  ASSERT_TRUE(allocator_->Free(a).ok());
  DeviceBlock d = Allocate(3 * M / 2, s1_.get());  // A's 2 fits; a rest of 0.5 is not split off
  EXPECT_EQ(d.ptr, a.ptr);
  EXPECT_EQ(d.size, 2u * kMiB);
  stats = allocator_->stats();
  EXPECT_EQ(stats.allocations, 4);
  EXPECT_EQ(stats.cache_hits, 2);
  EXPECT_EQ(stats.bytes_in_use, 2 * M);
  EXPECT_EQ(stats.peak_bytes_in_use, 8 * M);
  EXPECT_EQ(stats.bytes_reserved, 8 * M);
  EXPECT_EQ(stats.peak_bytes_reserved, 8 * M);
  EXPECT_THAT(stats.fragmentation, DoubleNear(0.75, 1e-12));

  // B is wholly cached and goes back; A holds d and stays.
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  stats = allocator_->stats();
  EXPECT_EQ(stats.bytes_reserved, 2 * M);
  EXPECT_EQ(stats.peak_bytes_reserved, 8 * M);
  EXPECT_EQ(stats.fragmentation, 0.0);
  EXPECT_TRUE(allocator_->Free(d).ok());
}

// Out of device memory: the cache goes back and the request is tried again;
// when nothing is left to give back, the error says what is held.
TEST_F(CachingAllocatorTest, OutOfMemoryGivesTheCacheBackAndRetries) {
  allocator_.reset();
  s1_.reset();
  s2_.reset();
  DeviceOptions options;
  options.memory_bytes = 100 * kMiB;
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("sim", options);
  ASSERT_TRUE(device.ok()) << device.status();
  device_ = *std::move(device);
  s1_ = NewStream("s1");
  allocator_ = std::make_unique<CachingAllocator>(device_.get());

  DeviceBlock big = Allocate(95 * kMiB, s1_.get());
  DeviceBlock piece = Allocate(4 * kMiB, s1_.get());
  ASSERT_TRUE(allocator_->Free(piece).ok());
  // The device has 1 MiB left: the cached 4 MiB go back first.
  DeviceBlock more = Allocate(5 * kMiB, s1_.get());
  EXPECT_NE(more.ptr, nullptr);
  AllocatorStats stats = allocator_->stats();
  EXPECT_EQ(stats.segments_released, 1);
  EXPECT_EQ(stats.bytes_reserved, static_cast<int64_t>(100 * kMiB));

  absl::StatusOr<DeviceBlock> too_much = allocator_->Allocate(2 * kMiB, s1_.get());
  ASSERT_EQ(too_much.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_much.status().message()), HasSubstr("out of memory"));
  EXPECT_THAT(std::string(too_much.status().message()),
              HasSubstr("the caching allocator holds 104857600 bytes in use of 104857600 reserved"));
  EXPECT_TRUE(allocator_->Free(more).ok());
  EXPECT_TRUE(allocator_->Free(big).ok());
}

TEST_F(CachingAllocatorTest, EmptyCacheGivesMemoryBackToTheDevice) {
  DeviceBlock kept = Allocate(512, s1_.get());
  DeviceBlock cached = Allocate(4 * kMiB, s1_.get());
  ASSERT_TRUE(allocator_->Free(cached).ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, kSmallSegment + 4 * kMiB);
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, kSmallSegment);
  // The device no longer knows the block: it was freed there.
  EXPECT_THAT(std::string(device_->FreeRaw(cached.ptr).message()), HasSubstr("not a live device block"));
  EXPECT_NE(Allocate(4 * kMiB, s1_.get()).ptr, nullptr);
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
  EXPECT_EQ(allocator_->stats().bytes_reserved, kSmallSegment) << "freed while s2 may be using it";
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
  // Per stream the first request takes a small segment; every later one
  // finds it whole again (each freed block merged back).
  EXPECT_EQ(stats.allocations - stats.cache_hits, kThreads);
  ASSERT_TRUE(allocator_->EmptyCache().ok());
  EXPECT_EQ(allocator_->stats().bytes_reserved, 0);
}

}  // namespace
}  // namespace nereid
