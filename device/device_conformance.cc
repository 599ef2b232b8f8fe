#include "device/device_conformance.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device_registry.h"
#include "device/test_gate.h"
#include "gmock/gmock.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// Device and pinned memory that a failing case still gives back.
class Buffer {
 public:
  enum Kind { kDeviceMemory, kPinned };
  Buffer(Device& device, Kind kind, size_t bytes) : device_(device), kind_(kind) {
    absl::StatusOr<void*> ptr = kind == kDeviceMemory ? device.AllocateRaw(bytes) : device.AllocateHostPinned(bytes);
    EXPECT_TRUE(ptr.ok()) << ptr.status();
    if (ptr.ok()) ptr_ = *ptr;
  }
  ~Buffer() {
    absl::Status status = kind_ == kDeviceMemory ? device_.FreeRaw(ptr_) : device_.FreeHostPinned(ptr_);
    EXPECT_TRUE(status.ok()) << status;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Device& device_;
  const Kind kind_;
  void* ptr_ = nullptr;
};

std::unique_ptr<Stream> NewStream(Device& device, const std::string& name) {
  absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream(name);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? *std::move(stream) : nullptr;
}

std::unique_ptr<Event> NewEvent(Device& device) {
  absl::StatusOr<std::unique_ptr<Event>> event = device.CreateEvent();
  EXPECT_TRUE(event.ok()) << event.status();
  return event.ok() ? *std::move(event) : nullptr;
}

}  // namespace

void PrintTo(const DeviceConformanceParam& param, std::ostream* os) {
  *os << param.label << " (backend " << param.backend << ", delay_us_max " << param.options.delay_us_max << ")";
}

std::string DeviceConformanceName(const ::testing::TestParamInfo<DeviceConformanceParam>& info) {
  return info.param.label;
}

void DeviceConformanceTest::SetUp() {
  if (GetParam().unavailable) {
    const std::string reason = GetParam().unavailable();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create(GetParam().backend,
                                                                                   GetParam().options);
  ASSERT_TRUE(device.ok()) << device.status();
  device_ = *std::move(device);
}

TEST_P(DeviceConformanceTest, CopiesRoundTripThroughDeviceMemory) {
  constexpr size_t kCount = 1000;
  const size_t bytes = kCount * sizeof(float);
  std::vector<float> in(kCount), out(kCount, -1.0f);
  std::iota(in.begin(), in.end(), 0.5f);
  Buffer a(*device_, Buffer::kDeviceMemory, bytes), b(*device_, Buffer::kDeviceMemory, bytes);
  Buffer pinned(*device_, Buffer::kPinned, bytes);
  std::unique_ptr<Stream> stream = NewStream(*device_, "copies");
  ASSERT_NE(stream, nullptr);

  ASSERT_TRUE(stream->CopyHostToDevice(a.as<void>(), in.data(), bytes).ok());
  ASSERT_TRUE(stream->CopyDeviceToDevice(b.as<void>(), a.as<void>(), bytes).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), b.as<void>(), bytes).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(pinned.as<void>(), b.as<void>(), bytes).ok());
  absl::Status status = stream->Synchronize();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(out, in);
  EXPECT_EQ(std::memcmp(pinned.as<float>(), in.data(), bytes), 0);
}

TEST_P(DeviceConformanceTest, LaunchesOnOneStreamRunInOrder) {
  std::unique_ptr<Stream> stream = NewStream(*device_, "ordered");
  ASSERT_NE(stream, nullptr);
  std::vector<int> order;  // written only by the stream's work, read after Synchronize
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(stream->Launch("push", [&order, i] {
                         order.push_back(i);
                         return absl::OkStatus();
                       }).ok());
  }
  ASSERT_TRUE(stream->Synchronize().ok());
  std::vector<int> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

// Stream A produces a value into device memory, stream B consumes it after
// waiting on A's event; A waits on B's event before overwriting the buffer
// in the next round. Each round checks that B saw exactly A's latest value.
TEST_P(DeviceConformanceTest, WaitOrdersWorkAcrossStreams) {
  constexpr int kRounds = 200;
  Buffer source(*device_, Buffer::kPinned, sizeof(int)), sink(*device_, Buffer::kPinned, sizeof(int));
  Buffer shared(*device_, Buffer::kDeviceMemory, sizeof(int));
  std::unique_ptr<Stream> a = NewStream(*device_, "producer"), b = NewStream(*device_, "consumer");
  std::unique_ptr<Event> produced = NewEvent(*device_), consumed = NewEvent(*device_);
  ASSERT_TRUE(a && b && produced && consumed);
  std::vector<int> seen;  // written by B's work only
  for (int round = 0; round < kRounds; ++round) {
    int* src = source.as<int>();
    int* dst = sink.as<int>();
    ASSERT_TRUE(a->Wait(*consumed).ok());
    ASSERT_TRUE(a->Launch("produce", [src, round] {
                   *src = round;
                   return absl::OkStatus();
                 }).ok());
    ASSERT_TRUE(a->CopyHostToDevice(shared.as<void>(), src, sizeof(int)).ok());
    ASSERT_TRUE(a->Record(*produced).ok());
    ASSERT_TRUE(b->Wait(*produced).ok());
    ASSERT_TRUE(b->CopyDeviceToHost(dst, shared.as<void>(), sizeof(int)).ok());
    ASSERT_TRUE(b->Launch("consume", [dst, &seen] {
                   seen.push_back(*dst);
                   return absl::OkStatus();
                 }).ok());
    ASSERT_TRUE(b->Record(*consumed).ok());
  }
  ASSERT_TRUE(a->Synchronize().ok());
  ASSERT_TRUE(b->Synchronize().ok());
  std::vector<int> expected(kRounds);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(seen, expected);
}

TEST_P(DeviceConformanceTest, EventCompletesWithTheWorkItMarks) {
  std::unique_ptr<Stream> stream = NewStream(*device_, "held");
  std::unique_ptr<Event> event = NewEvent(*device_);
  ASSERT_TRUE(stream && event);
  TestGate gate;
  absl::StatusOr<bool> done = event->Query();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done) << "an event never recorded counts as complete";

  ASSERT_TRUE(stream->Launch("hold", gate.Hold()).ok());
  ASSERT_TRUE(stream->Record(*event).ok());
  done = event->Query();
  EXPECT_TRUE(done.ok() && !*done) << "complete while its work is held";
  gate.Open();
  EXPECT_TRUE(event->Synchronize().ok());
  done = event->Query();
  EXPECT_TRUE(done.ok() && *done);
}

TEST_P(DeviceConformanceTest, FailedLaunchIsReportedBySynchronizeByName) {
  std::unique_ptr<Stream> stream = NewStream(*device_, "failing");
  ASSERT_NE(stream, nullptr);
  std::atomic<bool> ran_after{false};
  ASSERT_TRUE(stream->Launch("bad_kernel", [] { return absl::InternalError("boom"); }).ok());
  // Queued behind the failure (or refused once it is known): never runs.
  absl::Status later = stream->Launch("after", [&ran_after] {
    ran_after = true;
    return absl::OkStatus();
  });
  (void)later;
  absl::Status status = stream->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("bad_kernel"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("boom"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("failing"));
  EXPECT_FALSE(ran_after);
  absl::Status device_status = device_->Synchronize();
  EXPECT_THAT(std::string(device_status.message()), HasSubstr("bad_kernel"));
}

TEST_P(DeviceConformanceTest, DestroyingAStreamDrainsItsWork) {
  std::atomic<int> ran{0};
  {
    std::unique_ptr<Stream> stream = NewStream(*device_, "drained");
    ASSERT_NE(stream, nullptr);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(stream->Launch("slow", [&ran] {
                           std::this_thread::sleep_for(std::chrono::microseconds(100));
                           ++ran;
                           return absl::OkStatus();
                         }).ok());
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace nereid
