// Properties every registered gradient codec must have, with its default
// options: ranks end bitwise equal, reruns are identical, outputs are finite,
// the payload is smaller than the gradient, and state keeps its shape.

#include <cmath>
#include <map>

#include "compress/bit_stream.h"
#include "compress/bucket_codes.h"
#include "compress/codec_test_util.h"

namespace nereid {
namespace {

using testing_codec::RandomGradient;
using testing_codec::SimulatedRanks;

class EveryCodec : public ::testing::TestWithParam<std::string> {};

const std::vector<int64_t> kDims = {48, 5, 5, 4};  // a conv filter: 4800 values

std::vector<std::vector<float>> Gradients(int world, int64_t n, uint64_t seed) {
  std::vector<std::vector<float>> g;
  for (int r = 0; r < world; ++r) g.push_back(RandomGradient(n, seed + r, 0.01f));
  return g;
}

TEST_P(EveryCodec, RanksEndBitwiseEqualAndFinite) {
  SimulatedRanks ranks(GetParam(), kDims, 3);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> out = ranks.Step(Gradients(3, ranks.elements(), 100 + step));
    for (int r = 1; r < 3; ++r) {
      ASSERT_EQ(0, std::memcmp(out[0].data(), out[r].data(), out[0].size() * sizeof(float)))
          << GetParam() << ": rank " << r << " differs from rank 0 at step " << step;
    }
    for (float v : out[0]) ASSERT_TRUE(std::isfinite(v)) << GetParam();
  }
}

TEST_P(EveryCodec, RerunIsIdentical) {
  SimulatedRanks a(GetParam(), kDims, 2), b(GetParam(), kDims, 2);
  for (int step = 0; step < 3; ++step) {
    auto g = Gradients(2, a.elements(), 7 + step);
    std::vector<std::vector<float>> x = a.Step(g), y = b.Step(g);
    ASSERT_EQ(0, std::memcmp(x[0].data(), y[0].data(), x[0].size() * sizeof(float))) << GetParam();
  }
}

TEST_P(EveryCodec, PayloadIsSmallerThanTheGradient) {
  SimulatedRanks ranks(GetParam(), kDims, 1);
  EXPECT_LT(ranks.codec(0).PayloadFloats(), ranks.elements()) << GetParam();
  EXPECT_GT(ranks.codec(0).PayloadFloats(), 0) << GetParam();
}

TEST_P(EveryCodec, ZeroGradientAveragesToZero) {
  SimulatedRanks ranks(GetParam(), kDims, 2);
  std::vector<std::vector<float>> zero(2, std::vector<float>(ranks.elements(), 0.0f));
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<float>> out = ranks.Step(zero);
    for (float v : out[0]) ASSERT_EQ(v, 0.0f) << GetParam();
  }
}

TEST_P(EveryCodec, StateMatchesItsSpec) {
  SimulatedRanks ranks(GetParam(), kDims, 2);
  ranks.Step(Gradients(2, ranks.elements(), 3));
  std::vector<CodecStateSpec> specs = ranks.codec(0).State();
  ASSERT_EQ(specs.size(), ranks.state(0).size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(ElementCount(specs[i].dims), static_cast<int64_t>(ranks.state(0)[i].size())) << GetParam() << " " << specs[i].name;
    EXPECT_FALSE(specs[i].name.empty());
  }
}

// Two gradients fused into one collective per round (a node's gradients) end
// bitwise where each averaged alone ends, with their state.
TEST_P(EveryCodec, FusedGradientsMatchOneByOne) {
  const std::vector<int64_t> other = {24, 4, 3, 3};
  const int world = 2;
  SimulatedRanks first(GetParam(), kDims, world, {}, /*layer=*/0), second(GetParam(), other, world, {}, /*layer=*/1);
  std::vector<std::vector<float>> a = Gradients(world, first.elements(), 11), b = Gradients(world, second.elements(), 21);
  std::vector<std::vector<float>> want_a = first.Step(a), want_b = second.Step(b);

  testing_codec::InProcessWorld shared(world);
  SimulatedRanks fused_a(GetParam(), kDims, world, {}, 0), fused_b(GetParam(), other, world, {}, 1);
  std::vector<std::vector<float>> got_a(world, std::vector<float>(first.elements())),
      got_b(world, std::vector<float>(second.elements()));
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      testing_codec::InProcessWorld::Comm comm(&shared, r);
      std::vector<FusedGradient> fused;
      FusedGradient fa{&fused_a.codec(r), CodecStep{0, 7, 0}, a[r], {}, absl::MakeSpan(got_a[r])};
      for (auto& st : fused_a.state(r)) fa.state.push_back(absl::MakeSpan(st));
      FusedGradient fb{&fused_b.codec(r), CodecStep{0, 7, 1}, b[r], {}, absl::MakeSpan(got_b[r])};
      for (auto& st : fused_b.state(r)) fb.state.push_back(absl::MakeSpan(st));
      fused = {fa, fb};
      status[r] = AverageFused(fused, comm);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(got_a[r], want_a[r]) << GetParam() << " rank " << r;
    EXPECT_EQ(got_b[r], want_b[r]) << GetParam() << " rank " << r;
    EXPECT_EQ(fused_a.state(r), first.state(r)) << GetParam();
    EXPECT_EQ(fused_b.state(r), second.state(r)) << GetParam();
  }
}

TEST(CodecRegistryTest, UnknownNameListsTheBuiltOnes) {
  absl::StatusOr<std::unique_ptr<GradientCodec>> c = CodecRegistry::Global().Create("nope");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("qsgd"), std::string::npos) << c.status();
}

TEST(CodecOptionsTest, ParsesAndRejects) {
  absl::StatusOr<CodecOptions> o = CodecOptions::Parse("bits=4;bucket=128");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o->Integer("bits", 0, 2, 8), 4);
  EXPECT_EQ(*o->Integer("missing", 3, 0, 9), 3);
  EXPECT_FALSE(o->Integer("bits", 0, 5, 8).ok());
  EXPECT_EQ(o->ToString(), "bits=4;bucket=128");
  EXPECT_FALSE(CodecOptions::Parse("bits").ok());
  EXPECT_FALSE(CodecOptions(std::map<std::string, std::string>{{"x", "abc"}}).Number("x", 0).ok());
}

TEST(BitStreamTest, RoundTripsBitsAndGammaCodes) {
  std::mt19937_64 random(3);
  std::vector<std::pair<uint32_t, int>> written;  // (value, count) or (value, -1) for gamma
  std::vector<float> words(4000);
  BitWriter writer(absl::MakeSpan(words));
  for (int i = 0; i < 3000; ++i) {
    if (random() % 2 == 0) {
      const int count = 1 + static_cast<int>(random() % 32);
      const uint32_t v = static_cast<uint32_t>(random() & ((uint64_t{1} << count) - 1));
      writer.Put(v, count);
      written.push_back({v, count});
    } else {
      const uint32_t v = 1 + static_cast<uint32_t>(random() % (1u << (random() % 16)));
      writer.Put(BitWriter::GammaBits(v), BitWriter::GammaCount(v));
      written.push_back({v, -1});
    }
  }
  const int64_t used = writer.Finish();
  ASSERT_LE(used, static_cast<int64_t>(words.size()));
  BitReader reader(absl::MakeConstSpan(words.data(), used));
  for (size_t i = 0; i < written.size(); ++i) {
    const auto [v, count] = written[i];
    ASSERT_EQ(count < 0 ? reader.GetGamma() : reader.Get(count), v) << i;
  }
  EXPECT_EQ(reader.Get(32), 0u);     // past the end: zeros
  EXPECT_EQ(reader.GetGamma(), 1u);  // and no undefined shift on them
  EXPECT_EQ(BitWriter::GammaCount(1), 1);
  EXPECT_EQ(BitWriter::GammaCount(7), 5);
}

TEST(BitPackingTest, RoundTrips) {
  for (int bits : {1, 2, 3, 4, 8}) {
    std::vector<uint32_t> values(101);
    for (size_t i = 0; i < values.size(); ++i) values[i] = (i * 7 + 3) % (1u << bits);
    const codes::BucketLayout layout{101, 101, 1, bits};
    std::vector<float> code(layout.Floats(), 0.0f);
    codes::PackFields(layout, 101, code.data(), [&](int64_t i) { return values[i]; });
    std::vector<uint32_t> back;
    for (int64_t i = 0; i < 101; ++i) back.push_back(layout.Field(code.data(), i));
    ASSERT_EQ(back, values) << bits;
    EXPECT_EQ(code[0], 0.0f) << "the head is left alone";
  }
}

TEST(BitPackingTest, LayoutCountsEveryBucket) {
  const codes::BucketLayout layout{1030, 512, 2, 1};  // two full buckets and one of 6
  EXPECT_EQ(layout.Buckets(), 3);
  EXPECT_EQ(layout.Values(2), 6);
  EXPECT_EQ(layout.Offset(2), 2 * (2 + 16));
  EXPECT_EQ(layout.Floats(), 2 * (2 + 16) + 2 + 1);
}

TEST(UniformTest, DrawKIsTheKthOfTheSequence) {
  UniformSource in_order(12345);
  for (uint64_t k = 0; k < 100; ++k) ASSERT_EQ(in_order.Next(), codes::UniformAt(12345, k)) << k;
}

INSTANTIATE_TEST_SUITE_P(Codecs, EveryCodec, ::testing::ValuesIn(CodecRegistry::Global().Names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace nereid
