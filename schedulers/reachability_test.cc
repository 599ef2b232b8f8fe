// Tests for Reachability, one per law of reachability.h, on a straight line,
// the training loop, a gossip loop nested inside a step, and malformed graphs.

#include "schedulers/reachability.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/path_summary.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

ScopedTimestamp T(int64_t epoch, std::vector<int64_t> counters) { return ScopedTimestamp{epoch, std::move(counters)}; }

// The training loop: Input -> Forward -> Update -> Feedback -(+1 step)-> Forward.
enum : int { kInput = 0, kForward = 1, kUpdate = 2, kFeedback = 3, kGossip = 10, kMix = 11 };

void AddTrainingLoop(ReachabilityBuilder& b) {
  for (int l : {kInput, kForward, kUpdate, kFeedback}) b.AddLocation(l, 1);
  b.AddEdge(kInput, kForward, PathSummary::Identity(1));
  b.AddEdge(kForward, kUpdate, PathSummary::Identity(1));
  b.AddEdge(kUpdate, kFeedback, PathSummary::Identity(1));
  b.AddEdge(kFeedback, kForward, PathSummary::Feedback(1, 0));
}

Reachability TrainingLoop() {
  ReachabilityBuilder b;
  AddTrainingLoop(b);
  absl::StatusOr<Reachability> r = b.Build();
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

// A gossip loop inside each step, between Forward and Update:
// Input -> Forward -Enter-> Gossip -> Mix -(+1 round)-> Gossip; Mix -Leave-> Update
// -> Feedback -(+1 step)-> Forward. Times inside the gossip loop are (e; step, round).
Reachability NestedLoops() {
  ReachabilityBuilder b;
  for (int l : {kInput, kForward, kUpdate, kFeedback}) b.AddLocation(l, 1);
  b.AddLocation(kGossip, 2);
  b.AddLocation(kMix, 2);
  b.AddEdge(kInput, kForward, PathSummary::Identity(1));
  b.AddEdge(kForward, kGossip, PathSummary::Enter(1));
  b.AddEdge(kGossip, kMix, PathSummary::Identity(2));
  b.AddEdge(kMix, kGossip, PathSummary::Feedback(2, 1));
  b.AddEdge(kMix, kUpdate, PathSummary::Leave(2));
  b.AddEdge(kUpdate, kFeedback, PathSummary::Identity(1));
  b.AddEdge(kFeedback, kForward, PathSummary::Feedback(1, 0));
  absl::StatusOr<Reachability> r = b.Build();
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(ReachabilityTest, SameLocationIsTheOrder) {
  const Reachability r = TrainingLoop();
  EXPECT_TRUE(r.CouldResultIn(T(0, {3}), kForward, T(0, {3}), kForward));
  EXPECT_TRUE(r.CouldResultIn(T(0, {3}), kForward, T(1, {5}), kForward));
  EXPECT_FALSE(r.CouldResultIn(T(0, {3}), kForward, T(0, {2}), kForward));
  EXPECT_FALSE(r.CouldResultIn(T(1, {3}), kForward, T(0, {9}), kForward));  // the epoch never goes back
  // Forward lies on a cycle, whose minimal summary is +1 step.
  EXPECT_EQ(r.Summaries(kForward, kForward).elements(), std::vector<PathSummary>{PathSummary::Feedback(1, 0)});
  // Unknown locations could result in nothing.
  EXPECT_FALSE(r.CouldResultIn(T(0, {0}), 99, T(0, {0}), 99));
}

TEST(ReachabilityTest, StraightLineIsTheOrder) {
  ReachabilityBuilder b;
  for (int l : {7, 8, 9}) b.AddLocation(l, 1);
  b.AddEdge(7, 8, PathSummary::Identity(1));
  b.AddEdge(8, 9, PathSummary::Identity(1));
  absl::StatusOr<Reachability> r = b.Build();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Summaries(7, 9).elements(), std::vector<PathSummary>{PathSummary::Identity(1)});
  EXPECT_TRUE(r->Summaries(9, 7).empty());
  for (int64_t s1 = 0; s1 <= 3; ++s1) {
    for (int64_t s2 = 0; s2 <= 3; ++s2) {
      EXPECT_EQ(r->CouldResultIn(T(0, {s1}), 7, T(0, {s2}), 9), s1 <= s2) << s1 << " " << s2;
      EXPECT_FALSE(r->CouldResultIn(T(0, {s1}), 9, T(0, {s2}), 7));
    }
  }
}

TEST(ReachabilityTest, FeedbackAdvancesTheStep) {
  const Reachability r = TrainingLoop();
  EXPECT_TRUE(r.CouldResultIn(T(0, {3}), kFeedback, T(0, {4}), kForward));
  EXPECT_FALSE(r.CouldResultIn(T(0, {3}), kFeedback, T(0, {3}), kForward));
  // Work at Forward in step 3 holds Update in step 3 and every later step, not step 2.
  EXPECT_TRUE(r.CouldResultIn(T(0, {3}), kForward, T(0, {3}), kUpdate));
  EXPECT_TRUE(r.CouldResultIn(T(0, {3}), kForward, T(0, {7}), kUpdate));
  EXPECT_FALSE(r.CouldResultIn(T(0, {3}), kForward, T(0, {2}), kUpdate));
  // Input is upstream of the loop: nothing flows back to it.
  EXPECT_FALSE(r.CouldResultIn(T(0, {0}), kUpdate, T(0, {9}), kInput));
  EXPECT_EQ(r.Summaries(kFeedback, kForward).elements(), std::vector<PathSummary>{PathSummary::Feedback(1, 0)});
  EXPECT_EQ(r.Summaries(kForward, kUpdate).elements(), std::vector<PathSummary>{PathSummary::Identity(1)});
}

TEST(ReachabilityTest, NestedLoopsRoundsAndSteps) {
  const Reachability r = NestedLoops();
  const int64_t s = 4;
  const int64_t k = 2;
  // Round k of step s could result in round k+1 of step s, and round 0 of step s+1.
  EXPECT_TRUE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s, k + 1}), kGossip));
  EXPECT_TRUE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s + 1, 0}), kGossip));
  // Never in an earlier (or the same) round of step s at Gossip, nor in step s-1.
  EXPECT_FALSE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s, k}), kGossip));
  EXPECT_FALSE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s, 0}), kGossip));
  EXPECT_FALSE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s - 1, 9}), kGossip));
  EXPECT_FALSE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s - 1}), kUpdate));
  // It holds step s incomplete at Update (leaving drops the round).
  EXPECT_TRUE(r.CouldResultIn(T(0, {s, k}), kMix, T(0, {s}), kUpdate));
  // Entering starts at round 0: Forward in step s reaches every round of step s.
  EXPECT_TRUE(r.CouldResultIn(T(0, {s}), kForward, T(0, {s, 0}), kMix));
  EXPECT_TRUE(r.CouldResultIn(T(0, {s}), kForward, T(0, {s, 7}), kMix));
  EXPECT_FALSE(r.CouldResultIn(T(0, {s}), kForward, T(0, {s - 1, 7}), kMix));
  // The minimal summaries from Mix back to Mix: the next round, or the next step's round 0.
  const Antichain<PathSummary>& cycles = r.Summaries(kMix, kMix);
  Antichain<PathSummary> expected;
  expected.Insert(*PathSummary::Create(2, 0, {0, 1}, {}));
  expected.Insert(*PathSummary::Create(2, 1, {1}, {0}));
  EXPECT_EQ(cycles, expected);
  for (const PathSummary& c : cycles.elements()) EXPECT_TRUE(c.Advances()) << c;
}

// Every path of at most `max_edges` edges from loc1, by brute force.
bool CouldResultInByPaths(const std::vector<std::tuple<int, int, PathSummary>>& edges, const ScopedTimestamp& t1,
                          int loc1, const ScopedTimestamp& t2, int loc2, int max_edges) {
  if (loc1 == loc2 && LessEqual(t1, t2)) return true;
  std::function<bool(int, const ScopedTimestamp&, int)> walk = [&](int loc, const ScopedTimestamp& t, int left) {
    if (left == 0) return false;
    for (const auto& [from, to, summary] : edges) {
      if (from != loc) continue;
      std::optional<ScopedTimestamp> next = summary.ResultsIn(t);
      if (!next) continue;
      if (to == loc2 && LessEqual(*next, t2)) return true;
      if (walk(to, *next, left - 1)) return true;
    }
    return false;
  };
  return walk(loc1, t1, max_edges);
}

TEST(ReachabilityTest, CouldResultInIsTransitive) {
  const std::vector<std::tuple<int, int, PathSummary>> edges = {{kInput, kForward, PathSummary::Identity(1)},
                                                                {kForward, kGossip, PathSummary::Enter(1)},
                                                                {kGossip, kMix, PathSummary::Identity(2)},
                                                                {kMix, kGossip, PathSummary::Feedback(2, 1)},
                                                                {kMix, kUpdate, PathSummary::Leave(2)},
                                                                {kUpdate, kFeedback, PathSummary::Identity(1)},
                                                                {kFeedback, kForward, PathSummary::Feedback(1, 0)}};
  const Reachability r = NestedLoops();
  std::mt19937 rng(11);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<int> locations = {kInput, kForward, kGossip, kMix, kUpdate, kFeedback};
  auto point = [&] {
    const int loc = locations[uniform(0, static_cast<int>(locations.size()) - 1)];
    ScopedTimestamp t{uniform(0, 1), std::vector<int64_t>(r.Depth(loc))};
    for (int64_t& c : t.counters) c = uniform(0, 3);
    return std::make_pair(t, loc);
  };
  int agree_true = 0;
  int transitive = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto [t1, l1] = point();
    const auto [t2, l2] = point();
    const auto [t3, l3] = point();
    const bool a = r.CouldResultIn(t1, l1, t2, l2);
    ASSERT_EQ(a, CouldResultInByPaths(edges, t1, l1, t2, l2, 12)) << t1 << " at " << l1 << " -> " << t2 << " at " << l2;
    agree_true += a;
    if (a && r.CouldResultIn(t2, l2, t3, l3)) {
      ++transitive;
      ASSERT_TRUE(r.CouldResultIn(t1, l1, t3, l3)) << t1 << " at " << l1 << " -> " << t3 << " at " << l3;
    }
  }
  EXPECT_GT(agree_true, 300);
  EXPECT_GT(transitive, 50);
}

TEST(ReachabilityTest, CycleWithoutFeedbackIsRefused) {
  {
    ReachabilityBuilder b;
    b.AddLocation(5, 1);
    b.AddLocation(6, 1);
    b.AddEdge(5, 6, PathSummary::Identity(1));
    b.AddEdge(6, 5, PathSummary::Identity(1));
    absl::Status s = b.Build().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("cycle location 5 -> location 6 -> location 5"));
    EXPECT_THAT(s.message(), HasSubstr("every cycle must pass a Feedback"));
  }
  {
    // Leaving the gossip loop and entering it again, with no step Feedback.
    ReachabilityBuilder b;
    b.AddLocation(kForward, 1);
    b.AddLocation(kGossip, 2);
    b.AddLocation(kMix, 2);
    b.AddEdge(kForward, kGossip, PathSummary::Enter(1));
    b.AddEdge(kGossip, kMix, PathSummary::Identity(2));
    b.AddEdge(kMix, kGossip, PathSummary::Feedback(2, 1));
    b.AddEdge(kMix, kForward, PathSummary::Leave(2));
    absl::Status s = b.Build().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("cycle location 1 -> location 10 -> location 11 -> location 1"));
  }
  {
    // A self-loop with an identity summary.
    ReachabilityBuilder b;
    b.AddLocation(3, 0);
    b.AddEdge(3, 3, PathSummary::Identity(0));
    EXPECT_THAT(b.Build().status().message(), HasSubstr("cycle location 3 -> location 3"));
  }
}

TEST(ReachabilityTest, EdgeDepthMismatchIsRefused) {
  {
    ReachabilityBuilder b;
    b.AddLocation(1, 1);
    b.AddLocation(10, 2);
    b.AddEdge(1, 10, PathSummary::Identity(1));
    absl::Status s = b.Build().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("edge location 1 -> location 10"));
    EXPECT_THAT(s.message(), HasSubstr("the locations have depths 1 and 2"));
  }
  {
    ReachabilityBuilder b;
    b.AddLocation(1, 1);
    b.AddEdge(1, 4, PathSummary::Identity(1));
    absl::Status s = b.Build().status();
    EXPECT_THAT(s.message(), HasSubstr("edge location 1 -> location 4: unknown location 4"));
  }
  {
    ReachabilityBuilder b;
    b.AddLocation(1, 1);
    b.AddLocation(1, 2);
    EXPECT_THAT(b.Build().status().message(), HasSubstr("location 1 declared twice"));
    ReachabilityBuilder c;
    c.AddLocation(2, -1);
    EXPECT_EQ(c.Build().status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ReachabilityTest, RelaxationIsBounded) {
  ReachabilityBuilder b;
  AddTrainingLoop(b);
  absl::Status s = b.Build(/*max_relaxations=*/2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("no fixed point after 2 relaxations"));
  EXPECT_TRUE(b.Build(/*max_relaxations=*/1000).ok());
}

}  // namespace
}  // namespace nereid
