// GradiVeQ's GPU kernels compute the coefficients, decodes and covariance
// one output at a time (compress/gradiveq_steps.h) where the host codec walks
// slice by slice for speed: the two must give the same bits. Checked here on
// the host over three slicings (a short last slice, one whole slice, one
// short slice), with zeros, an infinity beside a zero (0 * inf is never
// added), a NaN, and sums whose order shows (2^-20 + 2^40 - 2^40).

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "compress/bucket_codes.h"
#include "compress/codec.h"
#include "compress/gradiveq_steps.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

uint32_t Bits(float v) { return codes::FloatBits(v); }
uint64_t Bits(double v) { return absl::bit_cast<uint64_t>(v); }

std::vector<float> Values(int64_t n, int64_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = (i + seed) % 5 == 0 ? 0.0f : static_cast<float>((i * 37 + seed * 11) % 23) / 7.0f - 1.5f;
  }
  return v;
}

TEST(GradiveqStepsTest, TheHostsSliceBySliceLoopsGiveTheOneOutputFunctionsBits) {
  const float big = std::ldexp(1.0f, 40), tiny = std::ldexp(1.0f, -20);
  for (const codes::GradiveqSlices slices : {codes::GradiveqSlices{137, 25, 4}, codes::GradiveqSlices{64, 64, 8},
                                             codes::GradiveqSlices{5, 8, 3}}) {
    SCOPED_TRACE(::testing::Message() << slices.elements << " values in slices of " << slices.slice << ", k "
                                      << slices.k);
    const int64_t n = slices.slice, k = slices.k, count = slices.Slices();
    std::vector<float> x = Values(slices.elements, 1), basis = Values(n * k, 2);
    // Coefficient 0 of slice 0 adds tiny, big and -big first (in order: 0
    // to start the rest; in another order, tiny).
    for (int64_t i = 0; i < 3 && i < slices.Length(0); ++i) basis[i * k] = 1.0f;
    if (slices.Length(0) >= 3) x[0] = tiny, x[1] = big, x[2] = -big;
    // Covariance (n - 2, n - 1) adds over slices 0, 1, 2 in that order: the same.
    if (count >= 3) {
      for (int64_t s = 0; s < 3; ++s) x[s * n + n - 2] = 1.0f;
      x[n - 1] = tiny, x[2 * n - 1] = big, x[3 * n - 1] = -big;
      // A NaN, and in the last slice a zero beside an infinity.
      x[n + 3] = std::numeric_limits<float>::quiet_NaN();
      x[slices.elements - 2] = 0.0f, x[slices.elements - 1] = std::numeric_limits<float>::infinity();
    }

    std::vector<float> coefficients(count * k);
    slices.Coefficients(x.data(), basis.data(), coefficients.data());
    for (int64_t s = 0; s < count; ++s) {
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(Bits(coefficients[s * k + j]), Bits(slices.Coefficient(x.data(), basis.data(), s, j)))
            << "slice " << s << ", coefficient " << j;
      }
    }
    // A code with its own order-revealing sum: value 0 adds tiny, big, -big.
    std::vector<float> code = Values(count * k, 3);
    for (int64_t j = 0; j < 3 && j < k; ++j) basis[j] = 1.0f;
    if (k >= 3) code[0] = tiny, code[1] = big, code[2] = -big;
    for (const bool subtract : {false, true}) {
      std::vector<float> out = Values(slices.elements, 4);
      const std::vector<float> before = out;
      slices.AddDecoded(basis.data(), code.data(), subtract, out.data());
      for (int64_t e = 0; e < slices.elements; ++e) {
        const float v = slices.Decoded(basis.data(), code.data(), e / n, e % n);
        ASSERT_EQ(Bits(out[e]), Bits(subtract ? before[e] - v : before[e] + v)) << "value " << e;
      }
    }
    for (const int64_t stride : {int64_t{1}, int64_t{2}}) {
      for (int64_t first = 0; first < stride; ++first) {
        std::vector<double> sums(n * n, 0.0);
        slices.CovarianceSums(x.data(), first, stride, sums.data());
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = i; j < n; ++j) {
            ASSERT_EQ(Bits(sums[i * n + j]), Bits(slices.CovarianceSum(x.data(), first, stride, i, j)))
                << "entry (" << i << ", " << j << "), slices from " << first << " by " << stride;
          }
        }
      }
    }
  }
}

// The GPU kernel reads the basis's word back only at the steps
// NeedsBasisWord names, and passes the last word read on at the others: the
// host codec played step by step (zero gradients until step 5, so the basis
// stays zero past the warm-up; then a restore to step 2's state) must give
// every step the kind the true basis gives, with a read at the first steps
// after the warm-up and none once the basis is non-zero.
TEST(GradiveqStepsTest, TheBasisWordIsReadOnlyWhereAStepsKindCanDependOnIt) {
  auto codec = CodecRegistry::Global().Create("gradiveq");
  ASSERT_TRUE(codec.ok());
  constexpr int64_t kElements = 37;
  ASSERT_TRUE((*codec)->Init({kElements}, *CodecOptions::Parse("warmup=3;refresh=4;slice=8;coefficients=2")).ok());
  const std::optional<codes::GradiveqCode> code = (*codec)->gradiveq_code();
  ASSERT_TRUE(code.has_value());
  std::vector<std::vector<float>> state;
  for (const CodecStateSpec& spec : (*codec)->State()) {
    int64_t n = 1;
    for (int64_t d : spec.dims) n *= d;
    state.emplace_back(n, 0.0f);
  }
  std::vector<std::vector<float>> at_step_2;
  codes::StickyWord last;
  std::vector<int64_t> reads;
  const std::vector<int64_t> steps = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 2, 3, 4, 5, 6, 7, 8};
  for (size_t t = 0; t < steps.size(); ++t) {
    const int64_t step = steps[t];
    SCOPED_TRACE(::testing::Message() << "step " << step << " (the " << t << "th played)");
    if (t == 2) at_step_2 = state;
    if (t == 12) state = at_step_2;  // a restore
    std::vector<absl::Span<float>> spans;
    for (auto& s : state) spans.push_back(absl::MakeSpan(s));
    const bool truly_zero = codes::AllZeroValues(state[1].data(), static_cast<int64_t>(state[1].size()));
    bool believed_zero = last.word == 0;
    if (code->NeedsBasisWord(step, last)) {
      reads.push_back(step);
      believed_zero = truly_zero;
      last.Read(step, truly_zero ? 0 : 1);
    }
    ASSERT_EQ(code->StepAt(step, believed_zero), code->StepAt(step, truly_zero));
    std::vector<float> gradient(kElements, 0.0f);
    if (step >= 5) {
      for (int64_t i = 0; i < kElements; ++i) gradient[i] = static_cast<float>((i * 7 + step) % 11) - 5.0f;
    }
    CodecStep cs;
    cs.step = step;
    std::vector<float> part((*codec)->RoundFloats(cs, 0, spans)), average(kElements);
    (*codec)->Contribute(cs, 0, 0, gradient, spans, absl::MakeSpan(part));
    (*codec)->Absorb(cs, 0, 1, gradient, spans, part, absl::MakeSpan(average));
  }
  // After the warm-up (3): zero at 3, 4 and 5 (its exact average makes the
  // first basis), non-zero at 6; after the restore, zero again at 3 and on.
  EXPECT_EQ(reads, (std::vector<int64_t>{3, 4, 5, 6, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace nereid
