#include "ops/cuda/elementwise_kernels.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace nereid::cuda {
namespace {

const int64_t kSizes[] = {0, 1, 1000, (int64_t{1} << 20) + 3};

// Owns n floats of device memory.
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { (void)FreeDevice(ptr_); }

  absl::Status Init(const std::vector<float>& host) {
    n_ = static_cast<int64_t>(host.size());
    absl::StatusOr<float*> ptr = AllocateDevice(n_);
    if (!ptr.ok()) return ptr.status();
    ptr_ = *ptr;
    return CopyToDevice(host.data(), ptr_, n_);
  }
  absl::StatusOr<std::vector<float>> ToHost() const {
    std::vector<float> host(static_cast<size_t>(n_));
    absl::Status s = CopyToHost(ptr_, host.data(), n_);
    if (!s.ok()) return s;
    return host;
  }
  float* get() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  int64_t n_ = 0;
};

// Values in [-4, 4) with some exact zeros and negative zeros mixed in.
std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = (i % 17 == 0) ? 0.0f : (i % 19 == 0) ? -0.0f : dist(rng);
  }
  return v;
}

// Exact comparison, reporting the count and the first mismatch only.
void ExpectBitwiseEqual(const std::vector<float>& got,
                        const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (mismatches++ == 0) first = i;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "first mismatch at " << first << ": got "
                            << got[first] << ", want " << want[first];
}

class CudaElementwiseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> count = DeviceCount();
    if (!count.ok()) {
      GTEST_SKIP() << "No CUDA device found: cudaGetDeviceCount failed: "
                   << count.status().message();
    }
    if (*count == 0) {
      GTEST_SKIP() << "No CUDA device found: cudaGetDeviceCount returned 0";
    }
  }
};

// Runs a binary kernel (out = f(a, b)) on every size against `ref`.
void CheckBinary(
    const std::function<absl::Status(const float*, const float*, float*,
                                     int64_t)>& kernel,
    const std::function<float(float, float)>& ref) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(absl::StrCat("n = ", n));
    const std::vector<float> a = RandomVector(n, 1), b = RandomVector(n, 2);
    DeviceArray da, db, dy;
    ASSERT_TRUE(da.Init(a).ok());
    ASSERT_TRUE(db.Init(b).ok());
    ASSERT_TRUE(dy.Init(std::vector<float>(static_cast<size_t>(n), 7.0f)).ok());
    absl::Status s = kernel(da.get(), db.get(), dy.get(), n);
    ASSERT_TRUE(s.ok()) << s;
    s = Synchronize(nullptr);
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<std::vector<float>> got = dy.ToHost();
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<float> want(static_cast<size_t>(n));
    for (size_t i = 0; i < want.size(); ++i) want[i] = ref(a[i], b[i]);
    ExpectBitwiseEqual(*got, want);
  }
}

TEST_F(CudaElementwiseTest, ReluForwardMatchesCpu) {
  CheckBinary(
      [](const float* x, const float*, float* y, int64_t n) {
        return ReluForward(x, y, n, nullptr);
      },
      [](float x, float) { return x > 0.0f ? x : 0.0f; });
}

TEST_F(CudaElementwiseTest, ReluForwardInPlace) {
  const int64_t n = 1000;
  const std::vector<float> x = RandomVector(n, 3);
  DeviceArray dx;
  ASSERT_TRUE(dx.Init(x).ok());
  ASSERT_TRUE(ReluForward(dx.get(), dx.get(), n, nullptr).ok());
  ASSERT_TRUE(Synchronize(nullptr).ok());
  absl::StatusOr<std::vector<float>> got = dx.ToHost();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<float> want(x);
  for (float& v : want) v = v > 0.0f ? v : 0.0f;
  ExpectBitwiseEqual(*got, want);
}

TEST_F(CudaElementwiseTest, ReluBackwardMatchesCpu) {
  // a = dy, b = x.
  CheckBinary(
      [](const float* dy, const float* x, float* dx, int64_t n) {
        return ReluBackward(dy, x, dx, n, nullptr);
      },
      [](float dy, float x) { return x > 0.0f ? dy : 0.0f; });
}

TEST_F(CudaElementwiseTest, AddMatchesCpu) {
  CheckBinary(
      [](const float* a, const float* b, float* y, int64_t n) {
        return Add(a, b, y, n, nullptr);
      },
      [](float a, float b) { return a + b; });
}

TEST_F(CudaElementwiseTest, MulMatchesCpu) {
  CheckBinary(
      [](const float* a, const float* b, float* y, int64_t n) {
        return Mul(a, b, y, n, nullptr);
      },
      [](float a, float b) { return a * b; });
}

TEST_F(CudaElementwiseTest, AxpyMatchesCpu) {
  const float alpha = -1.75f;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(absl::StrCat("n = ", n));
    const std::vector<float> x = RandomVector(n, 4), y = RandomVector(n, 5);
    DeviceArray dx, dy;
    ASSERT_TRUE(dx.Init(x).ok());
    ASSERT_TRUE(dy.Init(y).ok());
    absl::Status s = Axpy(alpha, dx.get(), dy.get(), n, nullptr);
    ASSERT_TRUE(s.ok()) << s;
    s = Synchronize(nullptr);
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<std::vector<float>> got = dy.ToHost();
    ASSERT_TRUE(got.ok()) << got.status();
    // The device may fuse the multiply-add: allow a few ulps of the terms.
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const float want = y[i] + alpha * x[i];
      const float tol =
          4e-7f * (std::fabs(alpha * x[i]) + std::fabs(y[i])) + 1e-30f;
      if (!(std::fabs((*got)[i] - want) <= tol) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << "first mismatch at " << first;
  }
}

TEST_F(CudaElementwiseTest, CudaErrorBecomesStatus) {
  // cudaFree of memory cudaMalloc did not return is a (non-sticky) CUDA error.
  float host = 0.0f;
  absl::Status s = FreeDevice(&host);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cudaFree"), absl::string_view::npos) << s;
  // A later launch is not blamed for it.
  DeviceArray d;
  ASSERT_TRUE(d.Init(std::vector<float>(10, -1.0f)).ok());
  s = ReluForward(d.get(), d.get(), 10, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Synchronize(nullptr).ok());
}

// These touch no device, so they run on any machine.

TEST(CudaElementwiseArgsTest, NullPointerWithElementsIsInvalidArgument) {
  float* null = nullptr;
  EXPECT_EQ(ReluForward(null, null, 8, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReluBackward(null, null, null, 8, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Add(null, null, null, 8, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Mul(null, null, null, 8, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = Axpy(2.0f, null, null, 8, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Axpy"), absl::string_view::npos) << s;
}

TEST(CudaElementwiseArgsTest, NegativeCountIsInvalidArgument) {
  EXPECT_EQ(Add(nullptr, nullptr, nullptr, -1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaElementwiseArgsTest, ZeroElementsLaunchNothing) {
  EXPECT_TRUE(ReluForward(nullptr, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(Axpy(1.0f, nullptr, nullptr, 0, nullptr).ok());
}

TEST(CudaErrorToStatusTest, TranslatesCodeNameAndString) {
  EXPECT_TRUE(CudaErrorToStatus(cudaSuccess, "Add").ok());
  absl::Status s = CudaErrorToStatus(cudaErrorInvalidValue, "Mul kernel launch");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Mul kernel launch"), absl::string_view::npos);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find(cudaGetErrorString(cudaErrorInvalidValue)),
            absl::string_view::npos)
      << s;
  EXPECT_EQ(CudaErrorToStatus(cudaErrorMemoryAllocation, "x").code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace nereid::cuda

namespace nereid::cuda {
namespace {

// NCCL links into the same binaries; its version query needs no device.
TEST(NcclLinkTest, ReportsItsVersion) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_GE(version, 20000) << "NCCL " << version;
  std::printf("NCCL version code %d\n", version);
}

}  // namespace
}  // namespace nereid::cuda
