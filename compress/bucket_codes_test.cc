// The GPU's way through a bucketed code (ops/cuda/codec_gpu.cu), played on
// the host with the same per-bucket functions: every bucket prepared, the
// draws numbered by a scan, the buckets encoded in any order, and each value
// decoded on its own from every rank's code in a fused buffer. It must give
// the host codec's bits: its code, its residual and its average (GatherCodec
// through AverageFused), for each coder, with a short last bucket, zeros,
// a NaN-free and a NaN-carrying gradient. QSGD's Elias coding likewise:
// buckets placed by scans and written at once, read from starts found by
// walking each rank's stream, each rank's code padded to the longest.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compress/bit_stream.h"
#include "compress/codec.h"
#include "compress/codec_test_util.h"
#include "compress/onebit_buckets.h"
#include "compress/qsgd_buckets.h"
#include "compress/qsgd_elias_buckets.h"
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
    const bool bucketed = method == "terngrad" || method == "onebit" || method == "qsgd";
    EXPECT_EQ((*codec)->bucket_layout().has_value(), bucketed) << method;
    // QSGD's default coding is Elias: its fields' layout, in words of
    // variable length.
    EXPECT_EQ((*codec)->variable_length(), method == "qsgd") << method;
  }
}

// QSGD's Elias coding in the GPU's order (ops/cuda/codec_gpu.cu): every
// bucket's norm and draw count, a scan, every bucket's fields and bit count,
// a scan, each bucket's words ORed in (buckets last first throughout).
std::vector<float> EncodeEliasAsTheGpu(const codes::QsgdElias& coder, const float* g, uint64_t seed) {
  const codes::BucketLayout& layout = coder.fixed.layout;
  const int64_t buckets = coder.Buckets();
  std::vector<float> code(coder.BoundFloats(), 0.0f);
  std::vector<uint64_t> draws(buckets), first_draw(buckets), bits(buckets), first_bit(buckets);
  std::vector<uint8_t> fields(layout.elements);
  for (int64_t b = buckets - 1; b >= 0; --b) {
    draws[b] = coder.fixed.Prepare(g + b * layout.bucket, nullptr, layout.Values(b), &code[1 + b]);
  }
  for (int64_t b = 0, sum = 0; b < buckets; ++b) first_draw[b] = sum, sum += draws[b];
  for (int64_t b = buckets - 1; b >= 0; --b) {
    const int64_t begin = b * layout.bucket;
    coder.Fields(g + begin, layout.Values(b), code[1 + b], seed, first_draw[b], &fields[begin]);
    bits[b] = coder.Bits(&fields[begin], layout.Values(b));
  }
  for (int64_t b = 0, sum = 0; b < buckets; ++b) first_bit[b] = sum, sum += bits[b];
  float* stream = code.data() + coder.StreamAt();
  for (int64_t b = buckets - 1; b >= 0; --b) {
    coder.Write(&fields[b * layout.bucket], layout.Values(b), first_bit[b], [&](uint64_t k, uint32_t word) {
      stream[k] = codes::BitsFloat(codes::FloatBits(stream[k]) | word);
    });
  }
  const uint64_t total = first_bit[buckets - 1] + bits[buckets - 1];
  code[0] = codes::BitsFloat(static_cast<uint32_t>(coder.StreamAt() + static_cast<int64_t>((total + 31) / 32)));
  return code;
}

// Decoding in the GPU's order: each rank's buckets' first bits found by
// walking its stream, then each bucket (last first) decoded from every
// rank's code, in rank order, and scaled.
std::vector<float> DecodeEliasAverageAsTheGpu(const codes::QsgdElias& coder, const float* codes, int64_t stride,
                                              int64_t floats, int world) {
  const codes::BucketLayout& layout = coder.fixed.layout;
  const int64_t buckets = coder.Buckets(), words = std::max<int64_t>(0, floats - coder.StreamAt());
  std::vector<uint64_t> starts(world * buckets);
  for (int r = world - 1; r >= 0; --r) {
    uint64_t at = 0;
    for (int64_t b = 0; b < buckets; ++b) {
      starts[r * buckets + b] = at;
      at = coder.Skip(codes + r * stride + std::min(floats, coder.StreamAt()), words, at, layout.Values(b));
    }
  }
  std::vector<float> average(layout.elements, 0.0f);
  const float inv = 1.0f / static_cast<float>(world);
  for (int64_t b = buckets - 1; b >= 0; --b) {
    float* out = &average[b * layout.bucket];
    for (int r = 0; r < world; ++r) {
      const float* code = codes + r * stride;
      const float norm = 1 + b < floats ? code[1 + b] : 0.0f;  // a code cut short: as the kernel
      coder.DecodeAdd(code + std::min(floats, coder.StreamAt()), words, starts[r * buckets + b], layout.Values(b), norm,
                      out);
    }
    for (int64_t i = 0; i < layout.Values(b); ++i) out[i] *= inv;
  }
  return average;
}

class EliasCodesTest : public ::testing::TestWithParam<std::map<std::string, std::string>> {};

TEST_P(EliasCodesTest, TheGpusOrderGivesTheHostsBits) {
  constexpr int kWorld = 3;
  for (int64_t elements : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{2053}}) {
    for (bool with_nan : {false, true}) {
      SCOPED_TRACE(CodecOptions(GetParam()).ToString() + " over " + std::to_string(elements) +
                   (with_nan ? " with a NaN" : ""));
      testing_codec::SimulatedRanks host("qsgd", {elements}, kWorld, GetParam());
      const std::optional<codes::BucketLayout> layout = host.codec(0).bucket_layout();
      ASSERT_TRUE(layout.has_value());
      const codes::QsgdElias coder{codes::QsgdBuckets{*layout}};
      ASSERT_EQ(coder.BoundFloats(), host.codec(0).PayloadFloats());
      std::vector<std::vector<float>> gradient(kWorld);
      for (int r = 0; r < kWorld; ++r) {
        gradient[r] = testing_codec::RandomGradient(elements, 200 + r);
        if (elements > 4) gradient[r][1] = 0.0f, gradient[r][2] = -0.0f, gradient[r][3] = 8.0f;  // a top level
        if (with_nan && r == 1) gradient[r][elements / 2] = std::nanf("");
      }
      for (int64_t step = 0; step < 2; ++step) {
        CodecStep cs;  // SimulatedRanks's
        cs.step = step, cs.seed = 7, cs.layer = 0;
        const std::vector<std::vector<float>> host_average = host.Step(gradient);
        // Each rank's code as the host codec writes it, and as the GPU does.
        std::vector<std::vector<float>> codes(kWorld);
        int64_t longest = 0;
        for (int r = 0; r < kWorld; ++r) {
          auto& gather = static_cast<GatherCodec&>(host.codec(r));
          std::vector<float> expected(gather.PayloadFloats(), -1.0f);
          gather.Encode(cs, r, gradient[r], {}, absl::MakeSpan(expected));
          codes[r] = EncodeEliasAsTheGpu(coder, gradient[r].data(), cs.UniformSeed(r));
          ASSERT_EQ(Bits(codes[r]), Bits(expected)) << "rank " << r << ", step " << step;
          longest = std::max(longest, gather.UsedFloats(codes[r]));
        }
        // Padded to the longest, at an offset and two codes' worth apart.
        const int64_t offset = 5, stride = 2 * longest + offset;
        std::vector<float> fused(stride * kWorld, -1.0f);
        for (int r = 0; r < kWorld; ++r) {
          const int64_t used = codes::FloatBits(codes[r][0]);
          for (int64_t i = 0; i < longest; ++i) fused[r * stride + offset + i] = i < used ? codes[r][i] : 0.0f;
        }
        const std::vector<float> average =
            DecodeEliasAverageAsTheGpu(coder, fused.data() + offset, stride, longest, kWorld);
        ASSERT_EQ(Bits(average), Bits(host_average[0])) << "step " << step;
      }
    }
  }
}

// On any stream, valid or not (long zero runs, gamma codes of up to 31
// zeros, a stream that ends), the Elias reader reads what the host's bit
// reader (compress/bit_stream.h) reads.
TEST(EliasCodesTest, AnyStreamReadsAsTheBitReader) {
  std::mt19937_64 random(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> words(40);
    for (float& w : words) {
      uint32_t bits = static_cast<uint32_t>(random());
      if (random() % 3 == 0) bits &= static_cast<uint32_t>(random()) & static_cast<uint32_t>(random());  // sparse
      if (random() % 5 == 0) bits = 0;
      w = codes::BitsFloat(bits);
    }
    BitReader reader(words);
    uint64_t at = 0;
    for (int i = 0; i < 600; ++i) {
      bool negative = false;
      const uint32_t level = codes::QsgdElias::Read(words.data(), static_cast<int64_t>(words.size()), at, negative);
      uint32_t expected = 0;
      bool expected_negative = false;
      if (reader.Get(1) != 0) {
        expected_negative = reader.Get(1) != 0;
        expected = reader.GetGamma();
      }
      ASSERT_EQ(level, expected) << "trial " << trial << ", word " << i;
      ASSERT_EQ(negative, expected_negative) << "trial " << trial << ", word " << i;
    }
  }
}

// The words Write packs are BitWriter's (compress/bit_stream.h) for the same
// fields, with buckets starting at any bit.
TEST(EliasCodesTest, WordsAreTheBitWritersWords) {
  std::mt19937_64 random(7);
  for (int bits : {2, 4, 8}) {
    const codes::QsgdElias coder{codes::QsgdBuckets{{1000, 37, 1, bits}}};
    std::vector<uint8_t> fields(1000);
    for (uint8_t& f : fields) {
      // Mostly low levels, as QSGD's, with the top level and both signs.
      const uint32_t level = random() % 4 == 0 ? static_cast<uint32_t>(random() % (coder.fixed.levels() + 1))
                                               : static_cast<uint32_t>(random() % 2);
      f = static_cast<uint8_t>(level | (random() % 2 == 0 ? coder.fixed.sign() : 0u));
    }
    std::vector<float> expected(coder.BoundFloats(), 0.0f), words(coder.BoundFloats(), 0.0f);
    BitWriter writer(absl::MakeSpan(expected));
    for (uint8_t f : fields) {
      const uint32_t level = f & (coder.fixed.sign() - 1);
      if (level == 0) {
        writer.Put(0, 1);
      } else {
        writer.Put(1 | ((f & coder.fixed.sign()) != 0 ? 2u : 0u) | (BitWriter::GammaBits(level) << 2),
                   2 + BitWriter::GammaCount(level));
      }
    }
    const int64_t used = writer.Finish();
    uint64_t at = 0;
    for (int64_t begin = 0; begin < 1000; begin += 37) {
      const int64_t n = std::min<int64_t>(37, 1000 - begin);
      const uint64_t end = coder.Write(&fields[begin], n, at, [&](uint64_t k, uint32_t word) {
        words[k] = codes::BitsFloat(codes::FloatBits(words[k]) | word);
      });
      ASSERT_EQ(end - at, coder.Bits(&fields[begin], n));
      at = end;
    }
    EXPECT_EQ(static_cast<int64_t>((at + 31) / 32), used) << "bits " << bits;
    EXPECT_EQ(Bits(words), Bits(expected)) << "bits " << bits;
  }
}

// A code cut short by a bad length word (shorter than its norms) decodes
// what it holds and reads nothing past it: the host's codec and the GPU's
// order alike (AddressSanitizer watches the reads in CI).
TEST(EliasCodesTest, ACodeCutShortReadsNothingPastItsEnd) {
  auto codec = CodecRegistry::Global().Create("qsgd");
  ASSERT_TRUE(codec.ok());
  ASSERT_TRUE((*codec)->Init({1000}, CodecOptions(std::map<std::string, std::string>{{"bucket", "100"}})).ok());
  auto& gather = static_cast<GatherCodec&>(**codec);
  const codes::QsgdElias coder{codes::QsgdBuckets{*gather.bucket_layout()}};
  const std::vector<float> gradient = testing_codec::RandomGradient(1000, 3);
  std::vector<float> code(gather.PayloadFloats(), 0.0f);
  CodecStep cs;
  gather.Encode(cs, 0, gradient, {}, absl::MakeSpan(code));
  for (int64_t floats : {int64_t{0}, int64_t{1}, int64_t{5}, coder.StreamAt(), coder.StreamAt() + 3}) {
    SCOPED_TRACE(floats);
    const std::vector<float> cut(code.begin(), code.begin() + floats);  // its own allocation: past it is out of bounds
    std::vector<float> host(1000, 0.0f);
    gather.DecodeAdd(cut, absl::MakeSpan(host));  // a world of one: the average is the decode
    EXPECT_EQ(Bits(DecodeEliasAverageAsTheGpu(coder, cut.data(), floats, floats, 1)), Bits(host));
    // Buckets whose norms were cut decode to zeros.
    for (int64_t i = std::max<int64_t>(0, floats - 1) * 100; i < 1000; ++i) ASSERT_EQ(host[i], 0.0f) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Options, EliasCodesTest,
                         ::testing::Values(std::map<std::string, std::string>{},
                                           std::map<std::string, std::string>{{"bits", "2"}, {"bucket", "7"}},
                                           std::map<std::string, std::string>{{"bits", "8"}, {"bucket", "100"}},
                                           std::map<std::string, std::string>{{"bits", "3"}, {"bucket", "1"}}));

}  // namespace
}  // namespace nereid
