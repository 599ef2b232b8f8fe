// Low-rank pushes (compress/low_rank_push.h): both ends of an edge decode
// the same value bit for bit, an edge's first push is exact, a difference of
// rank r arrives exactly in one push, a fixed difference shrinks push after
// push, and push-sum's mass (the ranks' sum) is kept on a ring; the GPU's
// per-output steps give the host's bits.

#include "compress/low_rank_push.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compress/powersgd_steps.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

std::vector<float> Random(int64_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = normal(random);
  return v;
}

double Distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s);
}

// One edge: the sender's and the receiver's state.
struct Edge {
  explicit Edge(const LowRankPush& push)
      : push(push), sent(push.elements()), received(push.elements()), basis(push.basis_floats()) {}
  // Pushes x; returns the message's size.
  size_t Push(const std::vector<float>& x, uint64_t seed) {
    std::vector<float> message(push.MessageFloats(started));
    push.Encode(x, started, seed, absl::MakeSpan(sent), absl::MakeSpan(basis), absl::MakeSpan(message));
    push.Decode(message, started, absl::MakeSpan(received));
    started = true;
    return message.size();
  }
  const LowRankPush& push;
  std::vector<float> sent, received, basis;
  bool started = false;
};

TEST(LowRankPushTest, BadSegmentsAreRefused) {
  EXPECT_THAT(LowRankPush::Create({}).status().message(), HasSubstr("at least one segment"));
  EXPECT_THAT(LowRankPush::Create({{4, 3, 3}}).status().message(), HasSubstr("segment 0: 4 x 3 at rank 3"));
  EXPECT_THAT(LowRankPush::Create({{4, 3, 1}, {0, 2, 0}}).status().message(), HasSubstr("segment 1"));
  EXPECT_TRUE(LowRankPush::Create({{4, 3, 2}, {5, 1, 0}}).ok());
}

TEST(LowRankPushTest, BothEndsDecodeTheSameValueAndTheFirstPushIsExact) {
  // A 12 x 20 matrix at rank 2 and a 7-value bias sent exactly.
  absl::StatusOr<LowRankPush> push = LowRankPush::Create({{12, 20, 2}, {7, 1, 0}});
  ASSERT_TRUE(push.ok());
  EXPECT_EQ(push->elements(), 247);
  EXPECT_EQ(push->basis_floats(), 40);
  EXPECT_EQ(push->MessageFloats(false), 247);
  EXPECT_EQ(push->MessageFloats(true), (12 + 20) * 2 + 7);
  Edge edge(*push);
  std::vector<float> x = Random(247, 1);
  EXPECT_EQ(edge.Push(x, 7), 247u);
  EXPECT_EQ(edge.sent, x);
  EXPECT_EQ(edge.received, x);
  for (int step = 0; step < 30; ++step) {
    std::vector<float> drift = Random(247, 100 + step);
    for (size_t i = 0; i < x.size(); ++i) x[i] += 0.1f * drift[i];
    EXPECT_EQ(edge.Push(x, step), static_cast<size_t>(push->MessageFloats(true)));
    ASSERT_EQ(edge.sent, edge.received) << "step " << step;  // bit for bit
    for (int i = 240; i < 247; ++i) EXPECT_EQ(edge.received[i], x[i]);  // the bias arrives exactly
  }
}

TEST(LowRankPushTest, ARankTwoChangeArrivesInOnePush) {
  absl::StatusOr<LowRankPush> push = LowRankPush::Create({{16, 24, 2}});
  ASSERT_TRUE(push.ok());
  Edge edge(*push);
  std::vector<float> x = Random(16 * 24, 2);
  edge.Push(x, 1);
  std::vector<float> u = Random(16 * 2, 3), v = Random(24 * 2, 4);
  for (int i = 0; i < 16; ++i) {
    for (int k = 0; k < 24; ++k) x[i * 24 + k] += u[i * 2] * v[k * 2] + u[i * 2 + 1] * v[k * 2 + 1];
  }
  edge.Push(x, 2);
  EXPECT_LT(Distance(edge.received, x), 1e-4 * Distance(x, std::vector<float>(x.size(), 0.0f)));
}

TEST(LowRankPushTest, AFixedDifferenceShrinksPushAfterPush) {
  absl::StatusOr<LowRankPush> push = LowRankPush::Create({{10, 30, 1}});
  ASSERT_TRUE(push.ok());
  Edge edge(*push);
  std::vector<float> x = Random(300, 5);
  edge.Push(x, 1);
  std::vector<float> moved = Random(300, 6);  // a full-rank change
  for (size_t i = 0; i < x.size(); ++i) x[i] += moved[i];
  double last = Distance(edge.received, x);
  for (int step = 0; step < 10; ++step) {
    edge.Push(x, step);
    const double now = Distance(edge.received, x);
    EXPECT_LT(now, last) << "push " << step;
    last = now;
  }
  // Ten rank-1 pushes of a rank-10 difference leave under 1% of it (one
  // power step per push: the directions are approximate, so not nothing).
  EXPECT_LT(last, 0.01 * Distance(moved, std::vector<float>(moved.size(), 0.0f)));
}

// Four ranks on a ring, each pushing to the next: y = x + c (arrival - sent),
// as the LowRankPush kernel computes it. The ranks' sum is kept whatever the
// codes leave out, because each decoded push is added once and taken off once.
TEST(LowRankPushTest, TheRanksSumIsKeptOnARing) {
  constexpr int kRanks = 4;
  constexpr float kConsensus = 0.25f;
  absl::StatusOr<LowRankPush> push = LowRankPush::Create({{8, 12, 1}, {3, 1, 0}});
  ASSERT_TRUE(push.ok());
  std::vector<Edge> edges(kRanks, Edge(*push));  // edge r: r -> r + 1
  std::vector<std::vector<float>> x;
  for (int r = 0; r < kRanks; ++r) x.push_back(Random(99, 10 + r));
  for (int step = 0; step < 20; ++step) {
    std::vector<double> before(99, 0.0), after(99, 0.0);
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float> local = Random(99, 1000 * step + r);  // a local step
      for (int i = 0; i < 99; ++i) before[i] += x[r][i] += 0.05f * local[i];
    }
    for (int r = 0; r < kRanks; ++r) edges[r].Push(x[r], step * kRanks + r);
    for (int r = 0; r < kRanks; ++r) {
      const Edge& in = edges[(r + kRanks - 1) % kRanks];
      const Edge& out = edges[r];
      for (int i = 0; i < 99; ++i) x[r][i] += kConsensus * (in.received[i] - out.sent[i]);
    }
    for (int r = 0; r < kRanks; ++r) {
      for (int i = 0; i < 99; ++i) after[i] += x[r][i];
    }
    for (int i = 0; i < 99; ++i) ASSERT_NEAR(after[i], before[i], 1e-4) << "step " << step << " value " << i;
  }
}

}  // namespace
}  // namespace nereid

namespace nereid {
namespace {

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// The GPU's way through a low-rank segment (ops/cuda/codec_gpu.cu:
// LowRankPushEncode), played on the host: PowerSGD's one-output functions
// (compress/powersgd_steps.h), each output on its own and in reverse order.
void EncodeSegmentAsTheGpu(int64_t n, int64_t m, int64_t r, const float* x, uint64_t seed, float* reference, float* q,
                           float* p_out, float* q_out) {
  std::vector<float> d(n * m);
  for (int64_t i = n * m - 1; i >= 0; --i) d[i] = x[i] - reference[i];
  const std::vector<float> normals = LowRankPush::SeedDraws(seed, m, r);
  for (int64_t j = r - 1; j >= 0; --j) {
    bool zero = true;
    for (int64_t k = 0; k < m; ++k) zero = zero && q[k * r + j] == 0.0f;
    for (int64_t k = 0; zero && k < m; ++k) q[k * r + j] = normals[k * r + j];
  }
  for (int64_t e = n * r - 1; e >= 0; --e) p_out[e] = codes::PowerSgdP(d.data(), q, m, r, e / r, e % r);
  std::vector<double> col(n), basis(n * r);
  codes::OrthonormaliseColumns(p_out, n, r, col.data(), basis.data());
  for (int64_t e = m * r - 1; e >= 0; --e) q[e] = q_out[e] = codes::PowerSgdQ(d.data(), p_out, n, m, r, e / r, e % r);
  for (int64_t e = n * m - 1; e >= 0; --e) reference[e] += codes::PowerSgdApproximation(p_out, q_out, r, e / m, e % m);
}

TEST(LowRankPushTest, TheGpusStepsGiveTheHostsBits) {
  // Segments of rank 1 to 3 beside an exact one; a warm start with one
  // column zeroed between pushes (seeded again, the other kept).
  const std::vector<PushSegment> segments = {{6, 25, 2}, {7, 1, 0}, {30, 40, 3}, {5, 5, 1}};
  absl::StatusOr<LowRankPush> push = LowRankPush::Create(segments);
  ASSERT_TRUE(push.ok());
  std::vector<float> reference(push->elements()), basis(push->basis_floats());
  std::vector<float> x = Random(push->elements(), 3);
  std::vector<float> message(push->MessageFloats(false));
  push->Encode(x, false, 1, absl::MakeSpan(reference), absl::MakeSpan(basis), absl::MakeSpan(message));
  std::vector<float> gpu_reference = reference, gpu_basis = basis;
  for (int step = 1; step < 4; ++step) {
    SCOPED_TRACE("push " + std::to_string(step));
    const std::vector<float> drift = Random(push->elements(), 50 + step);
    for (size_t i = 0; i < x.size(); ++i) x[i] += 0.1f * drift[i];
    if (step == 2) {
      for (int64_t k = 0; k < 25; ++k) basis[k * 2 + 1] = gpu_basis[k * 2 + 1] = 0.0f;
    }
    const uint64_t seed = 1000 + step;
    message.assign(push->MessageFloats(true), 0.0f);
    push->Encode(x, true, seed, absl::MakeSpan(reference), absl::MakeSpan(basis), absl::MakeSpan(message));
    std::vector<float> gpu_message(message.size());
    int64_t at = 0, sent = 0, warm = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      const auto [n, m, r] = segments[s];
      if (r == 0) {
        std::copy_n(&x[at], n * m, &gpu_message[sent]);
        std::copy_n(&x[at], n * m, &gpu_reference[at]);
        sent += n * m;
      } else {
        EncodeSegmentAsTheGpu(n, m, r, &x[at], seed + s, &gpu_reference[at], &gpu_basis[warm], &gpu_message[sent],
                              &gpu_message[sent + n * r]);
        sent += (n + m) * r;
        warm += m * r;
      }
      at += n * m;
    }
    ASSERT_EQ(Bits(gpu_message), Bits(message));
    ASSERT_EQ(Bits(gpu_reference), Bits(reference));
    ASSERT_EQ(Bits(gpu_basis), Bits(basis));
  }
}

}  // namespace
}  // namespace nereid
