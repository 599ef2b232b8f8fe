// The GPU's 16-bit wire conversions against the host's (comm/wire_format.h):
// the same codes for every value (NaN aside: any NaN code), the same
// decoded floats, and the same rounding residual. Skips without a GPU.

#include "comm/wire_format_gpu.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "comm/wire_format.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

bool HaveGpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

// Values that stress rounding: ties at both 16-bit precisions, fp16's
// subnormals and overflow, signed zeros, infinities, NaN, and random ones
// over many magnitudes.
std::vector<float> Probes() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f,
                          5.96e-8f, 2.98e-8f, 1e-9f, 6.1e-5f, 1.00048828125f, 1.0009765625f, 1.00390625f,
                          1.001953125f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(), 3.4e38f};
  std::mt19937 random(7);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f), sign(-1.0f, 1.0f);
  for (int i = 0; i < 4096; ++i) v.push_back(std::copysign(std::exp2(exponent(random)), sign(random)));
  return v;
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> ToHost(const T* device, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

bool SameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

TEST(WireFormatGpuTest, CodesDecodingAndResidualsMatchTheHost) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<float> values = Probes();
  const size_t n = values.size();
  for (WireType type : {WireType::kFloat16, WireType::kBFloat16}) {
    SCOPED_TRACE(std::string(WireTypeName(type)));
    const bool bf16 = type == WireType::kBFloat16;
    std::vector<uint16_t> host_codes(n);
    EncodeWire(type, values, host_codes.data());
    std::vector<float> host_decoded(n), host_residual(n, 0.5f);
    DecodeWire(type, host_codes.data(), absl::MakeSpan(host_decoded));
    for (size_t i = 0; i < n; ++i) host_residual[i] = 0.5f + (values[i] - host_decoded[i]);

    float* x = ToDevice(values);
    uint16_t* codes = ToDevice(std::vector<uint16_t>(n, 0));
    float* decoded = ToDevice(std::vector<float>(n, 0.0f));
    float* residual = ToDevice(std::vector<float>(n, 0.5f));
    ASSERT_EQ(wire_gpu::Encode(bf16, x, codes, static_cast<int64_t>(n), nullptr), 0);
    ASSERT_EQ(wire_gpu::Decode(bf16, codes, decoded, 1.0f, static_cast<int64_t>(n), nullptr), 0);
    ASSERT_EQ(wire_gpu::AddRoundingResidual(bf16, x, residual, static_cast<int64_t>(n), nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> gpu_codes = ToHost(codes, n);
    const std::vector<float> gpu_decoded = ToHost(decoded, n), gpu_residual = ToHost(residual, n);
    int differ = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool same_code = std::isnan(values[i]) ? SameFloat(host_decoded[i], gpu_decoded[i])
                                                   : host_codes[i] == gpu_codes[i];
      if (!same_code || !SameFloat(host_decoded[i], gpu_decoded[i]) || !SameFloat(host_residual[i], gpu_residual[i])) {
        if (++differ <= 5) ADD_FAILURE() << "value " << values[i] << ": host code " << host_codes[i] << ", gpu "
                                         << gpu_codes[i] << "; residual " << host_residual[i] << " vs "
                                         << gpu_residual[i];
      }
    }
    EXPECT_EQ(differ, 0);
    for (void* p : {static_cast<void*>(x), static_cast<void*>(codes), static_cast<void*>(decoded),
                    static_cast<void*>(residual)}) {
      EXPECT_EQ(cudaFree(p), cudaSuccess);
    }
  }
}

}  // namespace
}  // namespace nereid
