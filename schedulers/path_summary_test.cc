// Tests for PathSummary, one per law of path_summary.h, over random summaries
// (input depth 0..3, increments and start values 0..2) and timestamps.

#include "schedulers/path_summary.h"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  PathSummary Summary(int input_depth) {
    const int leave = Int(0, input_depth);
    std::vector<int64_t> inc(input_depth - leave);
    for (int64_t& i : inc) i = Int(0, 2);
    std::vector<int64_t> enter(Int(0, 2));
    for (int64_t& e : enter) e = Int(0, 2);
    absl::StatusOr<PathSummary> s = PathSummary::Create(input_depth, leave, inc, enter);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  // A summary at most `max_depth` deep at its output, so chains stay small.
  PathSummary SummaryUpTo(int input_depth, int max_depth) {
    while (true) {
      PathSummary s = Summary(input_depth);
      if (s.output_depth() <= max_depth) return s;
    }
  }
  ScopedTimestamp Time(int depth) {
    ScopedTimestamp t{Int(0, 3), std::vector<int64_t>(depth)};
    for (int64_t& c : t.counters) c = Int(0, 5);
    return t;
  }
  // A time >= t.
  ScopedTimestamp Above(ScopedTimestamp t) {
    t.epoch += Int(0, 2);
    for (int64_t& c : t.counters) c += Int(0, 2);
    return t;
  }
  // A summary <= s (same shape, each coordinate lowered at random).
  PathSummary Below(const PathSummary& s) {
    std::vector<int64_t> inc = s.increments();
    std::vector<int64_t> enter = s.enter();
    for (int64_t& i : inc) i -= Int(0, static_cast<int>(i));
    for (int64_t& e : enter) e -= Int(0, static_cast<int>(e));
    return *PathSummary::Create(s.input_depth(), s.leave(), inc, enter);
  }

 private:
  std::mt19937 rng_;
};

constexpr int kTrials = 2000;

TEST(PathSummaryTest, IdentityIsNeutral) {
  Gen g(1);
  for (int k = 0; k < kTrials; ++k) {
    const PathSummary s = g.Summary(g.Int(0, 3));
    EXPECT_EQ(PathSummary::Identity(s.input_depth()).FollowedBy(s), s);
    EXPECT_EQ(s.FollowedBy(PathSummary::Identity(s.output_depth())), s);
    const ScopedTimestamp t = g.Time(s.input_depth());
    EXPECT_EQ(PathSummary::Identity(t.depth()).ResultsIn(t), t);
  }
  EXPECT_TRUE(PathSummary::Identity(2).IsIdentity());
  EXPECT_TRUE(PathSummary().IsIdentity());
  EXPECT_FALSE(PathSummary::Feedback(2, 1).IsIdentity());
}

TEST(PathSummaryTest, CompositionIsAssociative) {
  Gen g(2);
  int defined = 0;
  for (int k = 0; k < kTrials; ++k) {
    const PathSummary a = g.SummaryUpTo(g.Int(0, 3), 4);
    // Mostly chained depths; sometimes a mismatch, where both sides must be undefined.
    const PathSummary b = g.SummaryUpTo(g.Int(0, 4) == 0 ? g.Int(0, 4) : a.output_depth(), 4);
    const PathSummary c = g.SummaryUpTo(g.Int(0, 4) == 0 ? g.Int(0, 4) : b.output_depth(), 4);
    std::optional<PathSummary> ab = a.FollowedBy(b);
    std::optional<PathSummary> bc = b.FollowedBy(c);
    std::optional<PathSummary> left = ab ? ab->FollowedBy(c) : std::nullopt;
    std::optional<PathSummary> right = bc ? a.FollowedBy(*bc) : std::nullopt;
    ASSERT_EQ(left, right) << a << " " << b << " " << c;
    defined += left.has_value();
  }
  EXPECT_GT(defined, kTrials / 2);
}

TEST(PathSummaryTest, CompositionIsSequencing) {
  Gen g(3);
  for (int k = 0; k < kTrials; ++k) {
    const PathSummary a = g.SummaryUpTo(g.Int(0, 3), 4);
    const PathSummary b = g.SummaryUpTo(a.output_depth(), 4);
    const ScopedTimestamp t = g.Time(a.input_depth());
    std::optional<PathSummary> ab = a.FollowedBy(b);
    ASSERT_TRUE(ab.has_value()) << a << " " << b;
    EXPECT_EQ(ab->input_depth(), a.input_depth());
    EXPECT_EQ(ab->output_depth(), b.output_depth());
    ASSERT_EQ(ab->ResultsIn(t), b.ResultsIn(*a.ResultsIn(t))) << a << " then " << b << " on " << t;
  }
  // Depths that do not fit compose to nothing.
  EXPECT_EQ(PathSummary::Enter(1).FollowedBy(PathSummary::Identity(1)), std::nullopt);
  EXPECT_EQ(PathSummary::Leave(1).ResultsIn(ScopedTimestamp{0, {1, 2}}), std::nullopt);
}

TEST(PathSummaryTest, ResultsAreMonotone) {
  Gen g(4);
  for (int k = 0; k < kTrials; ++k) {
    const PathSummary s = g.Summary(g.Int(0, 3));
    const ScopedTimestamp t1 = g.Time(s.input_depth());
    const ScopedTimestamp t2 = g.Above(t1);
    ASSERT_TRUE(LessEqual(t1, t2));
    ASSERT_TRUE(LessEqual(*s.ResultsIn(t1), *s.ResultsIn(t2))) << s << " on " << t1 << " and " << t2;
  }
}

TEST(PathSummaryTest, SmallerSummariesGiveSmallerResults) {
  Gen g(5);
  for (int k = 0; k < kTrials; ++k) {
    const PathSummary b = g.Summary(g.Int(0, 3));
    const PathSummary a = g.Below(b);
    ASSERT_TRUE(LessEqual(a, b));
    const ScopedTimestamp t = g.Time(b.input_depth());
    ASSERT_TRUE(LessEqual(*a.ResultsIn(t), *b.ResultsIn(t))) << a << " <= " << b << " on " << t;
  }
  // Different shapes do not compare.
  EXPECT_FALSE(LessEqual(PathSummary::Identity(1), PathSummary::Enter(1)));
  EXPECT_FALSE(LessEqual(PathSummary::Feedback(1, 0), PathSummary::Identity(1)));
  EXPECT_TRUE(LessEqual(PathSummary::Identity(1), PathSummary::Feedback(1, 0)));
}

TEST(PathSummaryTest, FeedbackStrictlyAdvances) {
  Gen g(6);
  // Feedback(d, i) adds 1 to counter i and nothing else.
  const ScopedTimestamp t{2, {3, 4, 5}};
  EXPECT_EQ(PathSummary::Feedback(3, 1).ResultsIn(t), (ScopedTimestamp{2, {3, 5, 5}}));
  EXPECT_TRUE(PathSummary::Feedback(3, 1).Advances());
  EXPECT_FALSE(PathSummary::Identity(3).Advances());
  EXPECT_FALSE(PathSummary::Enter(2).Advances());  // not a cycle's summary
  // Leaving a loop and entering it again at round 0 keeps no advanced counter.
  EXPECT_FALSE(PathSummary::Leave(2).FollowedBy(PathSummary::Enter(1))->Advances());
  int advancing = 0;
  for (int k = 0; k < kTrials; ++k) {
    // A cycle through a Feedback: Feedback(d, i), then a random path back to depth d.
    const int d = g.Int(1, 3);
    const int i = g.Int(0, d - 1);
    PathSummary cycle = PathSummary::Feedback(d, i);
    for (int hops = g.Int(0, 3); hops > 0 || cycle.output_depth() != d;) {
      const PathSummary next = hops > 0 ? g.SummaryUpTo(cycle.output_depth(), 4)
                                        : (cycle.output_depth() < d ? PathSummary::Enter(cycle.output_depth())
                                                                    : PathSummary::Leave(cycle.output_depth()));
      cycle = *cycle.FollowedBy(next);
      hops = hops > 0 ? hops - 1 : 0;
    }
    ASSERT_FALSE(cycle.IsIdentity()) << cycle;
    if (i < d - cycle.leave()) {  // the cycle keeps the fed-back counter
      ASSERT_TRUE(cycle.Advances()) << cycle;
      ++advancing;
    }
    if (cycle.Advances()) {
      const ScopedTimestamp u = g.Time(d);
      ASSERT_FALSE(LessEqual(*cycle.ResultsIn(u), u)) << cycle << " on " << u;
    }
  }
  EXPECT_GT(advancing, kTrials / 4);
}

TEST(PathSummaryTest, OverflowIsNullopt) {
  const ScopedTimestamp near_max{0, {INT64_MAX}};
  EXPECT_EQ(PathSummary::Feedback(1, 0).ResultsIn(near_max), std::nullopt);
  EXPECT_EQ(PathSummary::Identity(1).ResultsIn(near_max), near_max);
  const PathSummary big = *PathSummary::Create(1, 0, {INT64_MAX}, {});
  EXPECT_EQ(big.FollowedBy(PathSummary::Feedback(1, 0)), std::nullopt);
  const PathSummary enter_big = *PathSummary::Create(0, 0, {}, {INT64_MAX});
  EXPECT_EQ(enter_big.FollowedBy(PathSummary::Feedback(1, 0)), std::nullopt);
}

TEST(PathSummaryTest, CreateValidatesAndToStringNamesTheParts) {
  EXPECT_EQ(PathSummary::Create(-1, 0, {}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PathSummary::Create(1, 2, {}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PathSummary::Create(2, 1, {0, 0}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status back = PathSummary::Create(1, 0, {-1}, {}).status();
  EXPECT_EQ(back.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.message(), HasSubstr("no path goes back in time"));
  EXPECT_EQ(PathSummary::Create(0, 0, {}, {-2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PathSummary::Leave(2).FollowedBy(PathSummary::Feedback(1, 0))->FollowedBy(PathSummary::Enter(1))->ToString(),
      "{depth 2 -> 2: leave 1, add (1), enter (0)}");
  EXPECT_EQ(PathSummary::Enter(1).output_depth(), 2);
  EXPECT_EQ(PathSummary::Leave(1).output_depth(), 0);
}

TEST(PathSummaryDeathTest, FactoriesAbortOnProgrammingErrors) {
  EXPECT_DEATH(PathSummary::Feedback(1, 1), "scope_index");
  EXPECT_DEATH(PathSummary::Leave(0), "a loop to leave");
}

}  // namespace
}  // namespace nereid
