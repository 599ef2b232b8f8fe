// The codecs' GPU kernels (ops/cuda/gpu_codecs.h) against the host codecs,
// on a GPU (--config=cuda; skipped with a message where there is none):
// three ranks, each with its host codec and its GPU codec (its own state
// and scratch), run a step's rounds side by side. Each round every rank's
// part is compared, the parts are combined on the host (summed in rank
// order, or concatenated: NCCL's part is left out, so the comparison is of
// the codecs alone), and each rank absorbs them. The parts, the state
// (1-bit SGD's residual, top-k's momentum and residual, PowerSGD's residual
// and Q) and the averages must be the host's bits (the same functions, no
// fused multiply-adds), over two steps, with a short last bucket, zeros,
// ties and a NaN. QSGD's Elias coding sizes its second round from the
// first's lengths as the kernel does; GradiVeQ its step from the basis's
// state word (five steps: exact, a first basis, compressed, a refresh,
// compressed). Gossip's low-rank pushes likewise.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/low_rank_push.h"
#include "gtest/gtest.h"
#include "ops/cuda/codec_gpu.h"
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

void Upload(float* device, const std::vector<float>& host) {
  ASSERT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
}

struct Case {
  std::string method;
  std::map<std::string, std::string> options;
  std::vector<int64_t> dims;
};

// One rank: its host codec and state, its GPU codec's device memory.
struct Rank {
  std::unique_ptr<GradientCodec> host;
  std::vector<float> gradient;
  std::vector<std::vector<float>> state;
  std::unique_ptr<DeviceBuffer> g, device_state, scratch, part, average;
  std::vector<float*> state_on_device;
};

void Compare(const Case& c) {
  SCOPED_TRACE(c.method + " " + CodecOptions(c.options).ToString() + " over " + std::to_string(ElementCount(c.dims)));
  constexpr int kWorld = 3;
  const int64_t elements = ElementCount(c.dims);
  std::mt19937 rng(static_cast<uint32_t>(elements));
  std::normal_distribution<float> normal;
  std::vector<Rank> ranks(kWorld);
  std::unique_ptr<cuda::GpuCodec> gpu;
  int64_t most = 0;
  for (int r = 0; r < kWorld; ++r) {
    Rank& k = ranks[r];
    auto codec = CodecRegistry::Global().Create(c.method);
    ASSERT_TRUE(codec.ok());
    ASSERT_TRUE((*codec)->Init(c.dims, CodecOptions(c.options)).ok());
    k.host = std::move(*codec);
    if (gpu == nullptr) {
      auto made = cuda::MakeGpuCodec(c.method, *k.host, elements);
      ASSERT_TRUE(made.ok()) << made.status();
      gpu = std::move(*made);
      for (int round = 0; round < gpu->rounds(); ++round) most = std::max(most, gpu->round_floats(round));
    }
    k.gradient.resize(elements);
    for (float& v : k.gradient) v = normal(rng);
    if (elements > 4) k.gradient[1] = 0.0f, k.gradient[2] = -0.0f;
    if (elements > 8) k.gradient[5] = k.gradient[6] = 3.5f;  // a tie for top-k
    // (A NaN spreads over PowerSGD's P and GradiVeQ's covariance.)
    if (r == 1 && c.method != "powersgd" && c.method != "gradiveq") k.gradient[elements / 2] = std::nanf("");
    int64_t state_floats = 0;
    for (const CodecStateSpec& spec : k.host->State()) {
      k.state.emplace_back(ElementCount(spec.dims), 0.0f);
      state_floats += ElementCount(spec.dims);
    }
    k.g = std::make_unique<DeviceBuffer>(elements * sizeof(float));
    k.device_state = std::make_unique<DeviceBuffer>(state_floats * sizeof(float));
    k.scratch = std::make_unique<DeviceBuffer>(gpu->scratch_bytes(kWorld));
    k.part = std::make_unique<DeviceBuffer>(most * sizeof(float) * kWorld);
    k.average = std::make_unique<DeviceBuffer>(elements * sizeof(float));
    Upload(k.g->f(), k.gradient);
    ASSERT_EQ(cudaMemset(k.device_state->ptr, 0, state_floats * sizeof(float)), cudaSuccess);
    float* at = k.device_state->f();
    for (const auto& s : k.state) k.state_on_device.push_back(at), at += s.size();
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  // GradiVeQ's steps (warmup=2, refresh=3): exact, exact with a first
  // basis, compressed, exact with a new basis, compressed.
  const int64_t steps = c.method == "gradiveq" ? 5 : 2;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == 1 && c.method == "powersgd") {
      // PowerSGD's second step: Q's first column all ones and its second
      // zero (seeded again, the first kept), and a row 0 whose P[0][0] sum
      // shows its order (2^-20, 2^40, -2^40 first: 0 in order, 2^-20 not).
      const int64_t m = c.dims[1] * (c.dims.size() > 2 ? c.dims[2] * c.dims[3] : 1);
      for (Rank& k : ranks) {
        std::vector<float>& q = k.state[1];
        const int64_t r = static_cast<int64_t>(q.size()) / m;
        for (int64_t e = 0; e < m; ++e) {
          q[e * r] = 1.0f;
          if (r > 1) q[e * r + 1] = 0.0f;
        }
        for (int64_t e = 0; e < m; ++e) k.state[0][e] = 0.0f;
        k.gradient[0] = std::ldexp(1.0f, -20), k.gradient[1] = std::ldexp(1.0f, 40);
        k.gradient[2] = -std::ldexp(1.0f, 40);
        Upload(k.state_on_device[0], k.state[0]);
        Upload(k.state_on_device[1], q);
        Upload(k.g->f(), k.gradient);
      }
    }
    CodecStep cs;
    cs.step = step, cs.seed = 5, cs.layer = 1;
    std::vector<std::vector<float>> host_average(kWorld, std::vector<float>(elements));
    // The state words, read back as the kernel does.
    std::vector<uint32_t> words(kWorld, 0);
    for (int r = 0; r < kWorld && gpu->sized_by_state(); ++r) {
      DeviceBuffer word(sizeof(uint32_t));
      ASSERT_EQ(gpu->WriteStateWord(cs, ranks[r].state_on_device, static_cast<uint32_t*>(word.ptr), stream), 0);
      ASSERT_EQ(cudaMemcpy(&words[r], word.ptr, sizeof(uint32_t), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    std::vector<float> combined;
    for (int round = 0; round < gpu->rounds(); ++round) {
      int64_t floats = gpu->StepRoundFloats(round, cs, words[0]);
      if (round > 0 && gpu->variable_length()) {  // the kernel's way: the longest length word, within the bound
        int64_t longest = 0;
        for (int r = 0; r < kWorld; ++r) longest = std::max<int64_t>(longest, Bits({combined[r]})[0]);
        floats = std::min(longest, floats);
      }
      {
        std::vector<absl::Span<float>> spans;
        for (auto& s : ranks[0].state) spans.push_back(absl::MakeSpan(s));
        ASSERT_EQ(floats, ranks[0].host->RoundFloats(cs, round, spans));
      }
      combined.assign(gpu->summed() ? floats : floats * kWorld, 0.0f);
      for (int r = 0; r < kWorld; ++r) {
        Rank& k = ranks[r];
        std::vector<absl::Span<float>> spans;
        for (auto& s : k.state) spans.push_back(absl::MakeSpan(s));
        std::vector<float> part(floats, 0.0f);
        k.host->Contribute(cs, round, r, k.gradient, spans, absl::MakeSpan(part));
        ASSERT_EQ(gpu->Contribute(round, cs, r, k.g->f(), k.state_on_device, k.scratch->ptr, {floats, words[r]},
                                  k.part->f(), stream),
                  0);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(Bits(Download(k.part->f(), floats)), Bits(part)) << "round " << round << ", rank " << r;
        for (int64_t i = 0; i < floats; ++i) {
          if (gpu->summed()) {
            combined[i] += part[i];  // rank order, as the host's in-process sum
          } else {
            combined[r * floats + i] = part[i];
          }
        }
      }
      for (int r = 0; r < kWorld; ++r) {
        Rank& k = ranks[r];
        std::vector<absl::Span<float>> spans;
        for (auto& s : k.state) spans.push_back(absl::MakeSpan(s));
        k.host->Absorb(cs, round, kWorld, k.gradient, spans, combined, absl::MakeSpan(host_average[r]));
        Upload(k.part->f(), combined);
        ASSERT_EQ(gpu->Absorb(round, cs, k.part->f(), floats, {floats, words[r]}, kWorld, k.state_on_device,
                              k.scratch->ptr, k.average->f(), stream),
                  0);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      }
    }
    for (int r = 0; r < kWorld; ++r) {
      Rank& k = ranks[r];
      EXPECT_EQ(Bits(Download(k.average->f(), elements)), Bits(host_average[r])) << "step " << step << ", rank " << r;
      for (size_t s = 0; s < k.state.size(); ++s) {
        EXPECT_EQ(Bits(Download(k.state_on_device[s], k.state[s].size())), Bits(k.state[s]))
            << "step " << step << ", rank " << r << ", state " << s;
      }
    }
  }
  cudaStreamDestroy(stream);
}

TEST(CodecGpuTest, TheGpuComputesTheHostsBits) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (std::vector<int64_t> dims : {std::vector<int64_t>{1}, {1000}, {2053}, {int64_t{1} << 20}}) {
    const std::vector<Case> cases = {
        {"terngrad", {}, dims},
        {"terngrad", {{"bucket", "100"}}, dims},
        {"onebit", {}, dims},
        {"onebit", {{"bucket", "77"}}, dims},
        {"qsgd", {{"coding", "fixed"}}, dims},
        {"qsgd", {{"coding", "fixed"}, {"bits", "3"}, {"bucket", "50"}}, dims},
        {"qsgd", {}, dims},
        {"qsgd", {{"bits", "2"}, {"bucket", "7"}}, dims},
        {"qsgd", {{"bits", "8"}, {"bucket", "100"}}, dims},
        {"topk", {}, dims},
        {"topk", {{"ratio", "0.3"}, {"momentum", "0"}}, dims},
    };
    for (const Case& c : cases) Compare(c);
  }
  // PowerSGD on matrices: a conv filter's and a dense layer's shapes, rank 1
  // to 4 (its first step seeds Q from the host's normal draws).
  for (const Case& c : std::vector<Case>{{"powersgd", {}, {6, 1, 5, 5}},
                                         {"powersgd", {{"rank", "1"}}, {120, 400}},
                                         {"powersgd", {{"rank", "4"}}, {10, 84}}}) {
    Compare(c);
  }
  // GradiVeQ on conv filters, with and without error feedback, a short last
  // slice and as many coefficients as values.
  for (const Case& c : std::vector<Case>{
           {"gradiveq", {{"warmup", "2"}, {"refresh", "3"}}, {16, 6, 5, 5}},
           {"gradiveq", {{"warmup", "2"}, {"refresh", "3"}, {"error_feedback", "1"}, {"slice", "16"}}, {6, 1, 5, 5}},
           {"gradiveq",
            {{"warmup", "2"}, {"refresh", "3"}, {"error_feedback", "1"}, {"slice", "25"}, {"coefficients", "25"}},
            {6, 1, 5, 5}}}) {
    Compare(c);
  }
}

// Gossip's low-rank pushes (codec_gpu.h: LowRankPushEncode, AddProduct and
// Mix, segment by segment as the LowRankPush GPU kernel runs them) against
// LowRankPush::Encode and Decode: segments of rank 1 to 3 beside an exact
// one, three pushes after an edge's exact first, a warm start's column
// zeroed before the second (seeded again from the host's draws).
TEST(CodecGpuTest, LowRankPushesAreTheHostsBits) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<PushSegment> segments = {{6, 25, 2}, {7, 1, 0}, {30, 40, 3}, {5, 5, 1}};
  absl::StatusOr<LowRankPush> push = LowRankPush::Create(segments);
  ASSERT_TRUE(push.ok());
  const int64_t size = push->elements();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(size), reference(size), received(size), basis(push->basis_floats(), 0.0f);
  for (float& v : x) v = normal(rng);
  std::vector<float> message(push->MessageFloats(false));
  push->Encode(x, false, 1, absl::MakeSpan(reference), absl::MakeSpan(basis), absl::MakeSpan(message));
  push->Decode(message, false, absl::MakeSpan(received));
  DeviceBuffer d_x(size * sizeof(float)), d_reference(size * sizeof(float)), d_received(size * sizeof(float)),
      d_basis(basis.size() * sizeof(float)), d_message(size * sizeof(float)), d_y(size * sizeof(float));
  // The largest segment's work space: D, the normal draws, the doubles, the flags.
  DeviceBuffer d(30 * 40 * sizeof(float)), normals(40 * 3 * sizeof(float)), doubles((30 + 30 * 3) * sizeof(double)),
      zero(3);
  Upload(d_reference.f(), reference);
  Upload(d_received.f(), received);
  Upload(d_basis.f(), basis);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int step = 1; step < 4; ++step) {
    SCOPED_TRACE("push " + std::to_string(step));
    for (float& v : x) v += 0.1f * normal(rng);
    if (step == 2) {
      for (int64_t k = 0; k < 25; ++k) basis[k * 2 + 1] = 0.0f;
      Upload(d_basis.f(), basis);
    }
    Upload(d_x.f(), x);
    const uint64_t seed = 1000 + step;
    message.assign(push->MessageFloats(true), 0.0f);
    push->Encode(x, true, seed, absl::MakeSpan(reference), absl::MakeSpan(basis), absl::MakeSpan(message));
    push->Decode(message, true, absl::MakeSpan(received));
    int64_t at = 0, sent = 0, warm = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      const auto [n, m, r] = segments[s];
      if (r == 0) {
        ASSERT_EQ(cudaMemcpy(d_message.f() + sent, d_x.f() + at, n * m * sizeof(float), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_reference.f() + at, d_x.f() + at, n * m * sizeof(float), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_received.f() + at, d_message.f() + sent, n * m * sizeof(float),
                             cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        sent += n * m;
      } else {
        Upload(normals.f(), LowRankPush::SeedDraws(seed + s, m, r));
        double* col = static_cast<double*>(doubles.ptr);
        float* p = d_message.f() + sent;
        ASSERT_EQ(cuda::codecs::LowRankPushEncode(n, m, r, d_x.f() + at, d_reference.f() + at, d_basis.f() + warm,
                                                  normals.f(), d.f(), static_cast<unsigned char*>(zero.ptr), col,
                                                  col + n, p, p + n * r, stream),
                  0);
        ASSERT_EQ(cuda::codecs::LowRankPushAddProduct(n, m, r, p, p + n * r, d_received.f() + at, stream), 0);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        sent += (n + m) * r;
        warm += m * r;
      }
      at += n * m;
    }
    EXPECT_EQ(Bits(Download(d_message.f(), message.size())), Bits(message));
    EXPECT_EQ(Bits(Download(d_reference.f(), size)), Bits(reference));
    EXPECT_EQ(Bits(Download(d_basis.f(), basis.size())), Bits(basis));
    EXPECT_EQ(Bits(Download(d_received.f(), size)), Bits(received));
    // y = x + consensus * (received - sent), as the CPU kernel.
    std::vector<float> y(size);
    for (int64_t i = 0; i < size; ++i) y[i] = x[i] + 0.3f * (received[i] - reference[i]);
    ASSERT_EQ(cuda::codecs::LowRankPushMix(size, d_x.f(), d_received.f(), d_reference.f(), 0.3f, d_y.f(), stream), 0);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(Bits(Download(d_y.f(), size)), Bits(y));
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace nereid
