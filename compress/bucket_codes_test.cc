// The GPU's way through a bucketed code (ops/cuda/codec_gpu.cu), played on
// the host with the same per-bucket functions: every bucket prepared, the
// draws numbered by a scan, the buckets encoded in any order, and each value
// decoded on its own from every rank's code in a fused buffer. It must give
// the host codec's bits: its code, its residual and its average (GatherCodec
// through AverageFused), for each coder, with a short last bucket, zeros,
// a NaN-free and a NaN-carrying gradient.

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/codec_test_util.h"
#include "compress/onebit_buckets.h"
#include "compress/qsgd_buckets.h"
#include "compress/terngrad_buckets.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// The GPU's order: prepare every bucket, scan, encode the buckets last first.
template <typename Coder>
void EncodeAsTheGpu(const Coder& coder, const float* g, float* residual, uint64_t seed, float* code) {
  const codes::BucketLayout& layout = coder.layout;
  const int64_t buckets = layout.Buckets();
  std::vector<uint64_t> draws(buckets), first(buckets);
  for (int64_t b = buckets - 1; b >= 0; --b) {
    const int64_t begin = b * layout.bucket;
    draws[b] = coder.Prepare(g + begin, residual ? residual + begin : nullptr, layout.Values(b), code + layout.Offset(b));
  }
  for (int64_t b = 0, sum = 0; b < buckets; ++b) first[b] = sum, sum += draws[b];
  for (int64_t b = buckets - 1; b >= 0; --b) {
    const int64_t begin = b * layout.bucket;
    coder.Encode(g + begin, residual ? residual + begin : nullptr, layout.Values(b), seed, first[b],
                 code + layout.Offset(b));
  }
}

// One value at a time, from every rank's code at codes + r * stride.
template <typename Coder>
std::vector<float> DecodeAverageAsTheGpu(const Coder& coder, const float* codes, int64_t stride, int world) {
  const codes::BucketLayout& layout = coder.layout;
  std::vector<float> average(layout.elements);
  const float inv = 1.0f / static_cast<float>(world);
  for (int64_t i = layout.elements - 1; i >= 0; --i) {
    const int64_t b = i / layout.bucket, j = i - b * layout.bucket;
    float sum = 0.0f;
    for (int r = 0; r < world; ++r) {
      const float* block = codes + r * stride + layout.Offset(b);
      sum += coder.Value(block, layout.Field(block, j));
    }
    average[i] = sum * inv;
  }
  return average;
}

struct Case {
  std::string method;
  std::map<std::string, std::string> options;
};

template <typename Coder>
void Compare(const Case& c, int64_t elements, bool with_nan) {
  SCOPED_TRACE(c.method + " " + CodecOptions(c.options).ToString() + " over " + std::to_string(elements) +
               (with_nan ? " with a NaN" : ""));
  constexpr int kWorld = 3;
  testing_codec::SimulatedRanks host(c.method, {elements}, kWorld, c.options);
  const std::optional<codes::BucketLayout> layout = host.codec(0).bucket_layout();
  ASSERT_TRUE(layout.has_value());
  ASSERT_EQ(layout->Floats(), host.codec(0).PayloadFloats());
  const Coder coder{*layout};
  const bool keeps_residual = !host.codec(0).State().empty();
  std::vector<std::vector<float>> gradient(kWorld), residual(kWorld, std::vector<float>(elements, 0.0f));
  for (int r = 0; r < kWorld; ++r) {
    gradient[r] = testing_codec::RandomGradient(elements, 100 + r);
    if (elements > 4) gradient[r][1] = 0.0f, gradient[r][2] = -0.0f;
    if (with_nan && r == 1) gradient[r][elements / 2] = std::nanf("");
  }
  // Two steps: 1-bit SGD's residual carries over.
  for (int64_t step = 0; step < 2; ++step) {
    CodecStep cs;  // SimulatedRanks's
    cs.step = step, cs.seed = 7, cs.layer = 0;
    const std::vector<std::vector<float>> host_average = host.Step(gradient);
    // Every rank's code into one fused buffer, at an offset and two codes'
    // worth apart (the stride of a node that fuses two gradients).
    const int64_t offset = 5, stride = 2 * layout->Floats() + offset;
    std::vector<float> fused(stride * kWorld, -1.0f);
    for (int r = 0; r < kWorld; ++r) {
      EncodeAsTheGpu(coder, gradient[r].data(), keeps_residual ? residual[r].data() : nullptr, cs.UniformSeed(r),
                     fused.data() + r * stride + offset);
    }
    const std::vector<float> average = DecodeAverageAsTheGpu(coder, fused.data() + offset, stride, kWorld);
    ASSERT_EQ(Bits(average), Bits(host_average[0])) << "step " << step;
    for (int r = 0; keeps_residual && r < kWorld; ++r) {
      ASSERT_EQ(Bits(residual[r]), Bits(host.state(r)[0])) << "rank " << r << ", step " << step;
    }
  }
}

class BucketCodesTest : public ::testing::TestWithParam<Case> {};

TEST_P(BucketCodesTest, TheGpusOrderGivesTheHostsBits) {
  const Case& c = GetParam();
  for (int64_t elements : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{2053}}) {
    for (bool with_nan : {false, true}) {
      if (c.method == "terngrad") Compare<codes::TernGradBuckets>(c, elements, with_nan);
      if (c.method == "onebit") Compare<codes::OneBitBuckets>(c, elements, with_nan);
      if (c.method == "qsgd") Compare<codes::QsgdBuckets>(c, elements, with_nan);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Coders, BucketCodesTest,
                         ::testing::Values(Case{"terngrad", {}}, Case{"terngrad", {{"bucket", "100"}}},
                                           Case{"onebit", {}}, Case{"onebit", {{"bucket", "77"}}},
                                           Case{"qsgd", {{"coding", "fixed"}}},
                                           Case{"qsgd", {{"coding", "fixed"}, {"bits", "3"}, {"bucket", "50"}}},
                                           Case{"qsgd", {{"coding", "fixed"}, {"bits", "8"}, {"bucket", "1"}}}));

TEST(BucketCodesTest, OnlyBucketedCodesHaveALayout) {
  for (const std::string& method : CodecRegistry::Global().Names()) {
    auto codec = CodecRegistry::Global().Create(method);
    ASSERT_TRUE(codec.ok());
    if (!(*codec)->Init({64, 9}, CodecOptions()).ok()) continue;
    const bool bucketed = method == "terngrad" || method == "onebit";
    EXPECT_EQ((*codec)->bucket_layout().has_value(), bucketed) << method;  // QSGD's default coding is Elias
  }
}

}  // namespace
}  // namespace nereid
