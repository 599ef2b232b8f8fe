// The sim backend: the shared conformance cases (with and without random
// delays), plus what only the sim does: launches that touch device memory
// directly, poisoned memory, guard bytes, copy directions and draining.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_conformance.h"
#include "device/device_registry.h"
#include "device/sim_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

DeviceOptions Delayed(int64_t delay_us_max, uint64_t seed) {
  DeviceOptions options;
  options.delay_us_max = delay_us_max;
  options.seed = seed;
  return options;
}

INSTANTIATE_TEST_SUITE_P(Sim, DeviceConformanceTest,
                         ::testing::Values(DeviceConformanceParam{"sim", "sim", {}, nullptr},
                                           DeviceConformanceParam{"sim_delayed", "sim", Delayed(200, 7), nullptr}),
                         DeviceConformanceName);

std::unique_ptr<Device> NewSim(const DeviceOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("sim", options);
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? *std::move(device) : nullptr;
}

std::unique_ptr<Stream> NewStream(Device& device, const std::string& name) {
  absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream(name);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? *std::move(stream) : nullptr;
}

void* Allocate(Device& device, size_t bytes) {
  absl::StatusOr<void*> ptr = device.AllocateRaw(bytes);
  EXPECT_TRUE(ptr.ok()) << ptr.status();
  return ptr.ok() ? *ptr : nullptr;
}

TEST(SimDeviceTest, NamesItselfByOrdinal) {
  DeviceOptions options;
  options.ordinal = 3;
  std::unique_ptr<Device> device = NewSim(options);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->name(), "sim:3");
  EXPECT_EQ(device->kind(), DeviceKind::kSim);
  std::unique_ptr<Stream> stream = NewStream(*device, "compute");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->name(), "sim:3/compute");
  EXPECT_EQ(stream->native_handle(), nullptr);
}

TEST(SimDeviceTest, UnknownBackendListsTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("tpu", {});
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(device.status().message()), HasSubstr("'tpu'"));
  EXPECT_THAT(std::string(device.status().message()), HasSubstr("registered: sim"));
}

TEST(SimDeviceTest, RefusesNegativeOptions) {
  EXPECT_EQ(DeviceRegistry::Global().Create("sim", Delayed(-1, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  DeviceOptions options;
  options.ordinal = -1;
  EXPECT_EQ(DeviceRegistry::Global().Create("sim", options).status().code(), absl::StatusCode::kInvalidArgument);
}

// The sim's kernels are CPU kernels on device memory: B's launch reads what
// A's launch wrote, ordered only by events, under random delays. 200 rounds
// with a fixed seed; each must see exactly the latest value.
TEST(SimDeviceTest, LaunchesOnTwoStreamsShareDeviceMemoryThroughEvents) {
  constexpr int kRounds = 200;
  std::unique_ptr<Device> device = NewSim(Delayed(200, 12345));
  ASSERT_NE(device, nullptr);
  auto* cell = static_cast<int64_t*>(Allocate(*device, sizeof(int64_t)));
  ASSERT_NE(cell, nullptr);
  std::unique_ptr<Stream> a = NewStream(*device, "a"), b = NewStream(*device, "b");
  absl::StatusOr<std::unique_ptr<Event>> written = device->CreateEvent(), read = device->CreateEvent();
  ASSERT_TRUE(a && b && written.ok() && read.ok());
  std::vector<int64_t> seen;  // B's work only
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(a->Wait(**read).ok());
    ASSERT_TRUE(a->Launch("write", [cell, round] {
                   *cell = round;
                   return absl::OkStatus();
                 }).ok());
    ASSERT_TRUE(a->Record(**written).ok());
    ASSERT_TRUE(b->Wait(**written).ok());
    ASSERT_TRUE(b->Launch("read", [cell, &seen] {
                   seen.push_back(*cell);
                   return absl::OkStatus();
                 }).ok());
    ASSERT_TRUE(b->Record(**read).ok());
  }
  ASSERT_TRUE(device->Synchronize().ok());
  std::vector<int64_t> expected(kRounds);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(device->FreeRaw(cell).ok());
}

TEST(SimDeviceTest, WaitingOnFailedWorkFailsTheWaiter) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  std::unique_ptr<Stream> a = NewStream(*device, "a"), b = NewStream(*device, "b");
  absl::StatusOr<std::unique_ptr<Event>> event = device->CreateEvent();
  ASSERT_TRUE(a && b && event.ok());
  ASSERT_TRUE(a->Launch("broken", [] { return absl::DataLossError("bad input"); }).ok());
  ASSERT_TRUE(a->Record(**event).ok());
  ASSERT_TRUE(b->Wait(**event).ok());
  std::atomic<bool> consumed{false};
  // Refused if B has failed already, skipped if not yet: never run.
  absl::Status queued = b->Launch("consume", [&consumed] {
    consumed = true;
    return absl::OkStatus();
  });
  if (!queued.ok()) {
    EXPECT_THAT(std::string(queued.message()), HasSubstr("launch 'broken'"));
  }
  absl::Status status = b->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("sim:0/a: launch 'broken': bad input"));
  EXPECT_FALSE(consumed);
  absl::StatusOr<bool> done = (*event)->Query();
  EXPECT_EQ(done.status().code(), absl::StatusCode::kDataLoss);
}

TEST(SimDeviceTest, ThrowingWorkIsAnErrorNotACrash) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  std::unique_ptr<Stream> stream = NewStream(*device, "s");
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->Launch("thrower", []() -> absl::Status { throw std::runtime_error("oops"); }).ok());
  absl::Status status = stream->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("launch 'thrower': threw: oops"));
}

TEST(SimDeviceTest, FreshMemoryIsPoisoned) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  constexpr size_t kWords = 16;
  void* block = Allocate(*device, kWords * sizeof(uint32_t));
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 256, 0u);
  std::unique_ptr<Stream> stream = NewStream(*device, "s");
  ASSERT_NE(stream, nullptr);
  std::vector<uint32_t> words(kWords, 0);
  ASSERT_TRUE(stream->CopyDeviceToHost(words.data(), block, kWords * sizeof(uint32_t)).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  for (uint32_t word : words) EXPECT_EQ(word, kSimPoisonWord);
  float as_float;
  std::memcpy(&as_float, &words[0], sizeof(as_float));
  EXPECT_TRUE(std::isnan(as_float));
  EXPECT_TRUE(device->FreeRaw(block).ok());
}

TEST(SimDeviceTest, OverrunIsReportedByFreeRawNamingTheBlock) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  auto* block = static_cast<unsigned char*>(Allocate(*device, 100));
  ASSERT_NE(block, nullptr);
  std::unique_ptr<Stream> stream = NewStream(*device, "s");
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->Launch("off_by_one", [block] {
                       for (int i = 0; i <= 100; ++i) block[i] = 0;  // one byte too many
                       return absl::OkStatus();
                     }).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  absl::Status status = device->FreeRaw(block);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("sim:0: FreeRaw: device block #1 (100 bytes at 0x"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("1 guard byte(s) after the block overwritten, the first at "
                                                       "offset 100"));
  // Released all the same: a second free is a different error.
  EXPECT_THAT(std::string(device->FreeRaw(block).message()), HasSubstr("not a live device block"));
}

TEST(SimDeviceTest, UnderrunIsReportedByFreeRaw) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  auto* block = static_cast<unsigned char*>(Allocate(*device, 64));
  ASSERT_NE(block, nullptr);
  std::unique_ptr<Stream> stream = NewStream(*device, "s");
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->Launch("before_start", [block] {
                       block[-3] = 0;
                       return absl::OkStatus();
                     }).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  absl::Status status = device->FreeRaw(block);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("guard byte(s) before the block overwritten, the first at "
                                                       "offset -3"));
}

TEST(SimDeviceTest, FreeRawRefusesPointersItDidNotHandOut) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  auto* block = static_cast<unsigned char*>(Allocate(*device, 64));
  ASSERT_NE(block, nullptr);
  int host = 0;
  EXPECT_THAT(std::string(device->FreeRaw(&host).message()), HasSubstr("not a live device block"));
  EXPECT_THAT(std::string(device->FreeRaw(block + 8).message()), HasSubstr("it lies 8 bytes into device block #1"));
  EXPECT_TRUE(device->FreeRaw(block).ok());
  EXPECT_TRUE(device->FreeRaw(nullptr).ok());
  EXPECT_EQ(device->FreeHostPinned(&host).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SimDeviceTest, CopiesCheckWhichSideIsDeviceMemory) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  void* block = Allocate(*device, 64);
  ASSERT_NE(block, nullptr);
  std::unique_ptr<Stream> stream = NewStream(*device, "s");
  ASSERT_NE(stream, nullptr);
  char host[64] = {};
  absl::Status to_host_memory = stream->CopyHostToDevice(host, block, 64);  // arguments swapped
  EXPECT_EQ(to_host_memory.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(to_host_memory.message()), HasSubstr("sim:0/s: CopyHostToDevice: destination: "));
  EXPECT_THAT(std::string(to_host_memory.message()), HasSubstr("is not device memory"));
  absl::Status into_device = stream->CopyDeviceToHost(block, block, 64);
  EXPECT_THAT(std::string(into_device.message()), HasSubstr("is device memory"));
  absl::Status past_end = stream->CopyHostToDevice(block, host, 65);
  EXPECT_THAT(std::string(past_end.message()), HasSubstr("runs outside device block #1"));
  EXPECT_TRUE(stream->CopyHostToDevice(block, host, 64).ok());
  EXPECT_TRUE(stream->Synchronize().ok());
  EXPECT_TRUE(device->FreeRaw(block).ok());
}

TEST(SimDeviceTest, FreeRawWaitsForQueuedWork) {
  std::unique_ptr<Device> device = NewSim();
  ASSERT_NE(device, nullptr);
  auto* block = static_cast<int*>(Allocate(*device, sizeof(int)));
  ASSERT_NE(block, nullptr);
  std::unique_ptr<Stream> stream = NewStream(*device, "s");
  ASSERT_NE(stream, nullptr);
  int out = 0;
  ASSERT_TRUE(stream->Launch("slow_write", [block] {
                       std::this_thread::sleep_for(std::chrono::milliseconds(20));
                       *block = 42;
                       return absl::OkStatus();
                     }).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(&out, block, sizeof(int)).ok());
  // Must not free under the queued work (ASan or TSan would catch it).
  EXPECT_TRUE(device->FreeRaw(block).ok());
  EXPECT_EQ(out, 42);
}

TEST(SimDeviceTest, DestroyingTheDeviceWithPendingWorkDrainsIt) {
  std::atomic<int> ran{0};
  {
    std::unique_ptr<Device> device = NewSim(Delayed(100, 3));
    ASSERT_NE(device, nullptr);
    std::unique_ptr<Stream> a = NewStream(*device, "a"), b = NewStream(*device, "b");
    ASSERT_TRUE(a && b);
    for (int i = 0; i < 20; ++i) {
      for (Stream* s : {a.get(), b.get()}) {
        ASSERT_TRUE(s->Launch("count", [&ran] {
                       ++ran;
                       return absl::OkStatus();
                     }).ok());
      }
    }
    // Streams first, then the device: nothing synchronised by hand.
  }
  EXPECT_EQ(ran.load(), 40);
}

}  // namespace
}  // namespace nereid
