// The pinned pool over the sim device (whose pinned memory is tracked, so a
// block freed twice or not pinned is an error there): blocks by size class,
// reuse once returned, a copy out of device memory through a pinned block.

#include "device/pinned_pool.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_registry.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

std::unique_ptr<Device> SimDevice() {
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("sim", {});
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? *std::move(device) : nullptr;
}

TEST(PinnedPoolTest, ABlockReturnedIsHandedOutAgainForItsSizeClass) {
  std::unique_ptr<Device> device = SimDevice();
  ASSERT_NE(device, nullptr);
  PinnedPool pool(device.get());
  void* first = nullptr;
  {
    absl::StatusOr<std::shared_ptr<void>> a = pool.Acquire(5000);  // the 8 KiB class
    ASSERT_TRUE(a.ok()) << a.status();
    first = a->get();
    absl::StatusOr<std::shared_ptr<void>> b = pool.Acquire(6000);  // same class, while a is out: a new block
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_NE(b->get(), first);
    EXPECT_EQ(pool.stats().in_use, 2);
    EXPECT_EQ(pool.stats().pinned_bytes, 2 * 8192);
  }
  EXPECT_EQ(pool.stats().in_use, 0);
  absl::StatusOr<std::shared_ptr<void>> again = pool.Acquire(8192);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(pool.stats().reused, 1);
  absl::StatusOr<std::shared_ptr<void>> larger = pool.Acquire(8193);  // the next class: pinned anew
  ASSERT_TRUE(larger.ok()) << larger.status();
  EXPECT_EQ(pool.stats().reused, 1);
  EXPECT_EQ(pool.stats().pinned_bytes, 2 * 8192 + 16384);
  EXPECT_EQ(pool.stats().acquired, 4);
}

TEST(PinnedPoolTest, ACopyOutThroughAPinnedBlockArrivesWhenTheStreamIsDone) {
  std::unique_ptr<Device> device = SimDevice();
  ASSERT_NE(device, nullptr);
  PinnedPool pool(device.get());
  absl::StatusOr<std::unique_ptr<Stream>> stream = device->CreateStream("copies");
  ASSERT_TRUE(stream.ok()) << stream.status();
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  const size_t bytes = values.size() * sizeof(float);
  absl::StatusOr<void*> on_device = device->AllocateRaw(bytes);
  ASSERT_TRUE(on_device.ok()) << on_device.status();
  absl::StatusOr<std::shared_ptr<void>> staged = pool.Acquire(bytes);
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE((*stream)->CopyHostToDevice(*on_device, values.data(), bytes).ok());
  ASSERT_TRUE((*stream)->CopyDeviceToHost(staged->get(), *on_device, bytes).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(std::memcmp(staged->get(), values.data(), bytes), 0);
  staged->reset();
  EXPECT_EQ(pool.stats().in_use, 0);
  EXPECT_TRUE(device->FreeRaw(*on_device).ok());
}

}  // namespace
}  // namespace nereid
