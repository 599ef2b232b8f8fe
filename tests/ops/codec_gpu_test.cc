// The bucketed codecs' GPU kernels (ops/cuda/codec_gpu.h) against the host
// codecs, on a GPU (--config=cuda; skipped with a message where there is
// none): three ranks' gradients encoded on the GPU, each with its rank's
// seed, into one fused buffer of every rank's code, then every value's
// average decoded from it. The codes, 1-bit SGD's residuals and the average
// must be the host's bits (the same per-bucket functions, no fused
// multiply-adds), over two steps, with a short last bucket, zeros and a NaN.

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
#include "ops/cuda/codec_gpu.h"
#include "tests/gpu_gate.h"

namespace nereid {
namespace {

using cuda::codecs::Coder;

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
  Coder coder;
  std::map<std::string, std::string> options;
};

void Compare(const Case& c, int64_t elements) {
  SCOPED_TRACE(c.method + " " + CodecOptions(c.options).ToString() + " over " + std::to_string(elements));
  constexpr int kWorld = 3;
  std::vector<std::unique_ptr<GradientCodec>> host;
  std::vector<std::vector<float>> gradient(kWorld), residual(kWorld, std::vector<float>(elements, 0.0f));
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
    if (r == 1) gradient[r][elements / 2] = std::nanf("");
  }
  const std::optional<codes::BucketLayout> layout = host[0]->bucket_layout();
  ASSERT_TRUE(layout.has_value());
  const int64_t floats = layout->Floats();
  const bool keeps_residual = !host[0]->State().empty();
  DeviceBuffer g(elements * sizeof(float) * kWorld), res(elements * sizeof(float) * kWorld),
      codes(floats * sizeof(float) * kWorld), average(elements * sizeof(float));
  const size_t scratch_bytes = cuda::codecs::EncodeScratchBytes(c.coder, *layout);
  DeviceBuffer scratch(scratch_bytes);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(cudaMemcpy(g.f() + r * elements, gradient[r].data(), elements * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ASSERT_EQ(cudaMemset(res.ptr, 0, elements * sizeof(float) * kWorld), cudaSuccess);
  for (int64_t step = 0; step < 2; ++step) {
    CodecStep cs;
    cs.step = step, cs.seed = 5, cs.layer = 1;
    std::vector<float> host_codes(floats * kWorld, 0.0f);
    for (int r = 0; r < kWorld; ++r) {
      std::vector<absl::Span<float>> state;
      if (keeps_residual) state.push_back(absl::MakeSpan(residual[r]));
      host[r]->Contribute(cs, 0, r, gradient[r], state, absl::MakeSpan(host_codes).subspan(r * floats, floats));
      ASSERT_EQ(cuda::codecs::Encode(c.coder, *layout, g.f() + r * elements,
                                     keeps_residual ? res.f() + r * elements : nullptr, cs.UniformSeed(r),
                                     scratch.ptr, scratch_bytes, codes.f() + r * floats, stream),
                0);
    }
    std::vector<float> host_average(elements);
    host[0]->Absorb(cs, 0, kWorld, gradient[0], {}, host_codes, absl::MakeSpan(host_average));
    ASSERT_EQ(cuda::codecs::DecodeAverage(c.coder, *layout, codes.f(), floats, kWorld, average.f(), stream), 0);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(Bits(Download(codes.f(), floats * kWorld)), Bits(host_codes)) << "step " << step;
    EXPECT_EQ(Bits(Download(average.f(), elements)), Bits(host_average)) << "step " << step;
    for (int r = 0; keeps_residual && r < kWorld; ++r) {
      EXPECT_EQ(Bits(Download(res.f() + r * elements, elements)), Bits(residual[r])) << "rank " << r;
    }
  }
  cudaStreamDestroy(stream);
}

TEST(CodecGpuTest, TheGpuWritesTheHostsCodesAndAverages) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Case> cases = {
      {"terngrad", Coder::kTernGrad, {}},
      {"terngrad", Coder::kTernGrad, {{"bucket", "100"}}},
      {"onebit", Coder::kOneBit, {}},
      {"onebit", Coder::kOneBit, {{"bucket", "77"}}},
      {"qsgd", Coder::kQsgd, {{"coding", "fixed"}}},
      {"qsgd", Coder::kQsgd, {{"coding", "fixed"}, {"bits", "3"}, {"bucket", "50"}}},
  };
  for (const Case& c : cases) {
    for (int64_t elements : {int64_t{1}, int64_t{1000}, int64_t{2053}, int64_t{1} << 20}) Compare(c, elements);
  }
}

}  // namespace
}  // namespace nereid
