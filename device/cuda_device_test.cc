// The cuda backend against the shared conformance cases (device_conformance.h),
// plus what only it does. Built under --config=cuda; without a GPU every case
// skips, saying why.

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/device_conformance.h"
#include "device/device_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

// Empty when a CUDA device is present; otherwise why the cases skip.
std::string NoCudaDevice() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat("No CUDA device found: cudaGetDeviceCount failed: ", cudaGetErrorString(error));
  }
  return count == 0 ? "No CUDA device found: cudaGetDeviceCount returned 0" : "";
}

INSTANTIATE_TEST_SUITE_P(Cuda, DeviceConformanceTest,
                         ::testing::Values(DeviceConformanceParam{"cuda", "cuda", {}, NoCudaDevice}),
                         DeviceConformanceName);

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NoCudaDevice();
    if (!reason.empty()) GTEST_SKIP() << reason;
    absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("cuda", {});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }

  std::unique_ptr<Device> device_;
};

TEST_F(CudaDeviceTest, NamesAndHandles) {
  EXPECT_EQ(device_->name(), "cuda:0");
  EXPECT_EQ(device_->kind(), DeviceKind::kCuda);
  absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream("compute");
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->name(), "cuda:0/compute");
  EXPECT_NE((*stream)->native_handle(), nullptr);
}

TEST_F(CudaDeviceTest, MissingOrdinalIsAnError) {
  DeviceOptions options;
  options.ordinal = 1 << 20;
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceRegistry::Global().Create("cuda", options);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(device.status().message()), HasSubstr("no such device"));
}

TEST_F(CudaDeviceTest, CudaErrorsNameTheCall) {
  absl::StatusOr<void*> huge = device_->AllocateRaw(size_t{1} << 60);
  EXPECT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("cudaMalloc"));
  cudaGetLastError();  // a failed cudaMalloc is not sticky, but clear it anyway
}

TEST_F(CudaDeviceTest, CachingAllocatorReusesDeviceMemory) {
  absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream("alloc");
  ASSERT_TRUE(stream.ok()) << stream.status();
  CachingAllocator allocator(device_.get());
  absl::StatusOr<DeviceBlock> a = allocator.Allocate(1 << 20, stream->get());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(allocator.Free(*a).ok());
  absl::StatusOr<DeviceBlock> b = allocator.Allocate(1 << 20, stream->get());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ptr, a->ptr);
  EXPECT_TRUE(allocator.Free(*b).ok());
  EXPECT_TRUE(allocator.EmptyCache().ok());
  EXPECT_EQ(allocator.stats().bytes_reserved, 0);
}

}  // namespace
}  // namespace nereid
