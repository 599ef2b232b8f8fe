// The gather codecs' GPU kernels (ops/cuda/gpu_codecs.h) against the host
// codecs, on a GPU (--config=cuda; skipped with a message where there is
// none): three ranks' gradients encoded on the GPU, each with its rank's
// seed, into one fused buffer of every rank's code, then every value's
// average decoded from it. The codes, the state (1-bit SGD's residual,
// top-k's momentum and residual) and the average must be the host's bits
// (the same functions, no fused multiply-adds), over two steps, with a
// short last bucket, zeros, ties and a NaN.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "gtest/gtest.h"
#include "ops/cuda/gpu_codecs.h"
#include "tests/gpu_gate.h"

namespace nereid {
namespace {

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// Device memory freed when it goes.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  float* f() { return static_cast<float*>(ptr); }
  void* ptr = nullptr;
};

std::vector<float> Download(const float* device, size_t n) {
  std::vector<float> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

struct Case {
  std::string method;
  std::map<std::string, std::string> options;
};

void Compare(const Case& c, int64_t elements) {
  SCOPED_TRACE(c.method + " " + CodecOptions(c.options).ToString() + " over " + std::to_string(elements));
  constexpr int kWorld = 3;
  std::vector<std::unique_ptr<GradientCodec>> host;
  std::vector<std::vector<float>> gradient(kWorld);
  std::mt19937 rng(static_cast<uint32_t>(elements));
  std::normal_distribution<float> normal;
  for (int r = 0; r < kWorld; ++r) {
    auto codec = CodecRegistry::Global().Create(c.method);
    ASSERT_TRUE(codec.ok());
    ASSERT_TRUE((*codec)->Init({elements}, CodecOptions(c.options)).ok());
    host.push_back(std::move(*codec));
    gradient[r].resize(elements);
    for (float& v : gradient[r]) v = normal(rng);
    if (elements > 4) gradient[r][1] = 0.0f, gradient[r][2] = -0.0f;
    if (elements > 8) gradient[r][5] = gradient[r][6] = 3.5f;  // a tie for top-k
    if (r == 1) gradient[r][elements / 2] = std::nanf("");
  }
  auto gpu = cuda::MakeGpuCodec(c.method, *host[0], elements);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t floats = (*gpu)->floats();
  ASSERT_EQ(floats, host[0]->PayloadFloats());
  const int states = static_cast<int>(host[0]->State().size());
  std::vector<std::vector<std::vector<float>>> state(kWorld, std::vector<std::vector<float>>(states));
  for (auto& rank : state) {
    for (auto& s : rank) s.assign(elements, 0.0f);
  }
  DeviceBuffer g(elements * sizeof(float) * kWorld), device_state(elements * sizeof(float) * kWorld * (states + 1)),
      codes(floats * sizeof(float) * kWorld), average(elements * sizeof(float)), scratch((*gpu)->scratch_bytes());
  auto state_of = [&](int r) {
    std::vector<float*> ptrs;
    for (int k = 0; k < states; ++k) ptrs.push_back(device_state.f() + (r * states + k) * elements);
    return ptrs;
  };
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(cudaMemcpy(g.f() + r * elements, gradient[r].data(), elements * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ASSERT_EQ(cudaMemset(device_state.ptr, 0, elements * sizeof(float) * kWorld * (states + 1)), cudaSuccess);
  for (int64_t step = 0; step < 2; ++step) {
    CodecStep cs;
    cs.step = step, cs.seed = 5, cs.layer = 1;
    std::vector<float> host_codes(floats * kWorld, 0.0f);
    for (int r = 0; r < kWorld; ++r) {
      std::vector<absl::Span<float>> spans;
      for (auto& s : state[r]) spans.push_back(absl::MakeSpan(s));
      host[r]->Contribute(cs, 0, r, gradient[r], spans, absl::MakeSpan(host_codes).subspan(r * floats, floats));
      ASSERT_EQ((*gpu)->Encode(g.f() + r * elements, state_of(r), cs.UniformSeed(r), scratch.ptr,
                               codes.f() + r * floats, stream),
                0);
    }
    std::vector<float> host_average(elements);
    host[0]->Absorb(cs, 0, kWorld, gradient[0], {}, host_codes, absl::MakeSpan(host_average));
    ASSERT_EQ((*gpu)->DecodeAverage(codes.f(), floats, kWorld, average.f(), stream), 0);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(Bits(Download(codes.f(), floats * kWorld)), Bits(host_codes)) << "step " << step;
    EXPECT_EQ(Bits(Download(average.f(), elements)), Bits(host_average)) << "step " << step;
    for (int r = 0; r < kWorld; ++r) {
      for (int k = 0; k < states; ++k) {
        EXPECT_EQ(Bits(Download(state_of(r)[k], elements)), Bits(state[r][k])) << "rank " << r << ", state " << k;
      }
    }
  }
  cudaStreamDestroy(stream);
}

TEST(CodecGpuTest, TheGpuWritesTheHostsCodesAndAverages) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Case> cases = {
      {"terngrad", {}},
      {"terngrad", {{"bucket", "100"}}},
      {"onebit", {}},
      {"onebit", {{"bucket", "77"}}},
      {"qsgd", {{"coding", "fixed"}}},
      {"qsgd", {{"coding", "fixed"}, {"bits", "3"}, {"bucket", "50"}}},
      {"topk", {}},
      {"topk", {{"ratio", "0.3"}, {"momentum", "0"}}},
  };
  for (const Case& c : cases) {
    for (int64_t elements : {int64_t{1}, int64_t{1000}, int64_t{2053}, int64_t{1} << 20}) Compare(c, elements);
  }
}

}  // namespace
}  // namespace nereid
