// PowerSGD's GPU kernels compute P and Q one output at a time
// (compress/powersgd_steps.h) where the host codec accumulates row by row
// for speed: the two must give the same bits. Played here on the host over
// two steps in a world of one, rank 1 to 3, with the host codec's own parts
// as the reference; the second step's values make P's first sum show its
// order. (The approximation's check is the host's own function: it guards
// the residual's update.)

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "compress/codec.h"
#include "compress/orthonormalise.h"
#include "compress/powersgd_steps.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(PowerSgdStepsTest, OneOutputAtATimeGivesTheHostCodecsBits) {
  for (const auto& [rows, cols, rank] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{6, 25, 2}, {40, 7, 3},
                                                                                            {13, 13, 1}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols << " at rank " << rank);
    auto codec = CodecRegistry::Global().Create("powersgd");
    ASSERT_TRUE(codec.ok());
    ASSERT_TRUE((*codec)->Init({rows, cols}, *CodecOptions::Parse("rank=" + std::to_string(rank))).ok());
    std::vector<float> residual(rows * cols, 0.0f), q(cols * rank, 0.0f), gradient(rows * cols);
    for (int64_t step = 0; step < 2; ++step) {
      for (int64_t i = 0; i < rows * cols; ++i) gradient[i] = static_cast<float>((i * 37 + step * 11) % 23) / 7.0f - 1.5f;
      if (step == 1) {
        // A sum whose order shows: with Q's first column all ones and no
        // residual in row 0, P[0][0] adds 2^-20, 2^40 and -2^40 first (in
        // order: 0; in another: 2^-20). And a zero second column: seeded
        // again while the first is kept.
        for (int64_t k = 0; k < cols; ++k) {
          q[k * rank] = 1.0f;
          if (rank > 1) q[k * rank + 1] = 0.0f;
        }
        for (int64_t k = 0; k < cols; ++k) residual[k] = 0.0f;
        gradient[0] = std::ldexp(1.0f, -20), gradient[1] = std::ldexp(1.0f, 40), gradient[2] = -std::ldexp(1.0f, 40);
      }
      CodecStep cs;
      cs.step = step;
      std::vector<absl::Span<float>> state = {absl::MakeSpan(residual), absl::MakeSpan(q)};
      std::vector<float> p_part(rows * rank), q_part(cols * rank), average(rows * cols);
      (*codec)->Contribute(cs, 0, 0, gradient, state, absl::MakeSpan(p_part));  // M in the residual, Q seeded
      for (int64_t e = 0; e < rows * rank; ++e) {
        ASSERT_EQ(codes::PowerSgdP(residual.data(), q.data(), cols, rank, e / rank, e % rank), p_part[e]) << e;
      }
      (*codec)->Absorb(cs, 0, 1, gradient, state, p_part, absl::MakeSpan(average));
      std::vector<float> p = p_part;  // the codec's P: the mean (of one) orthonormalised
      Orthonormalise(absl::MakeSpan(p), rows, rank);
      (*codec)->Contribute(cs, 1, 0, gradient, state, absl::MakeSpan(q_part));
      for (int64_t e = 0; e < cols * rank; ++e) {
        ASSERT_EQ(codes::PowerSgdQ(residual.data(), p.data(), rows, cols, rank, e / rank, e % rank), q_part[e]) << e;
      }
      const std::vector<float> m = residual;
      (*codec)->Absorb(cs, 1, 1, gradient, state, q_part, absl::MakeSpan(average));
      for (int64_t e = 0; e < rows * cols; ++e) {
        const float a = codes::PowerSgdApproximation(p.data(), q.data(), rank, e / cols, e % cols);
        ASSERT_EQ(average[e], a) << e;
        ASSERT_EQ(residual[e], m[e] - a) << e;
      }
    }
  }
}

}  // namespace
}  // namespace nereid
