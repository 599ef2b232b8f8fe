// Tests for ProgressState, one per law of progress_state.h, on the training loop
// with a gossip loop nested inside each step, then a random simulation that
// checks every law after every batch.

#include "schedulers/progress_state.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedulers/path_summary.h"
#include "schedulers/reachability.h"
#include "schedulers/scoped_timestamp.h"

namespace nereid {
namespace {

using ::testing::HasSubstr;

ScopedTimestamp T(int64_t epoch, std::vector<int64_t> counters) { return ScopedTimestamp{epoch, std::move(counters)}; }

// Input -> Forward -Enter-> Gossip -> Mix -(+1 round)-> Gossip; Mix -Leave-> Update
// -> Feedback -(+1 step)-> Forward.
enum : int { kInput = 0, kForward = 1, kUpdate = 2, kFeedback = 3, kGossip = 10, kMix = 11 };

const std::vector<std::tuple<int, int, PathSummary>>& Edges() {
  static const auto* const kEdges =
      new std::vector<std::tuple<int, int, PathSummary>>{{kInput, kForward, PathSummary::Identity(1)},
                                                         {kForward, kGossip, PathSummary::Enter(1)},
                                                         {kGossip, kMix, PathSummary::Identity(2)},
                                                         {kMix, kGossip, PathSummary::Feedback(2, 1)},
                                                         {kMix, kUpdate, PathSummary::Leave(2)},
                                                         {kUpdate, kFeedback, PathSummary::Identity(1)},
                                                         {kFeedback, kForward, PathSummary::Feedback(1, 0)}};
  return *kEdges;
}

const std::vector<int>& Locations() {
  static const auto* const kLocations = new std::vector<int>{kInput, kForward, kGossip, kMix, kUpdate, kFeedback};
  return *kLocations;
}

std::shared_ptr<const Reachability> NestedLoops() {
  ReachabilityBuilder b;
  for (int l : {kInput, kForward, kUpdate, kFeedback}) b.AddLocation(l, 1);
  b.AddLocation(kGossip, 2);
  b.AddLocation(kMix, 2);
  for (const auto& [from, to, summary] : Edges()) b.AddEdge(from, to, summary);
  absl::StatusOr<Reachability> r = b.Build();
  EXPECT_TRUE(r.ok()) << r.status();
  return std::make_shared<const Reachability>(*std::move(r));
}

// A state whose only work is the input's capability at (0; 0).
ProgressState Fresh() {
  absl::StatusOr<ProgressState> s = ProgressState::Create(NestedLoops(), {{T(0, {0}), kInput, +1}});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(ProgressStateTest, CreateTakesPositiveInitialCapabilities) {
  EXPECT_EQ(ProgressState::Create(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status zero = ProgressState::Create(NestedLoops(), {{T(0, {0}), kInput, 0}}).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("((0; 0), location 0)"));
  EXPECT_FALSE(ProgressState::Create(NestedLoops(), {{T(0, {0, 0}), kInput, 1}}).ok());  // depth
  ProgressState s = Fresh();
  EXPECT_EQ(s.Count(T(0, {0}), kInput), 1);
  EXPECT_EQ(s.counts().size(), 1u);
}

TEST(ProgressStateTest, CountsNeverNegative) {
  ProgressState s = Fresh();
  absl::Status st = s.Apply({{T(0, {3}), kForward, -1}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("((0; 3), location 1)"));
  EXPECT_THAT(st.message(), HasSubstr("negative"));
  EXPECT_EQ(s.Count(T(0, {3}), kForward), 0);
  ASSERT_TRUE(s.Apply({{T(0, {0}), kForward, +2}}).ok());
  EXPECT_EQ(s.Apply({{T(0, {0}), kForward, -3}}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Count(T(0, {0}), kForward), 2);
}

TEST(ProgressStateTest, BatchesAreAtomic) {
  ProgressState s = Fresh();
  ASSERT_TRUE(s.Apply({{T(0, {0}), kForward, +1}}).ok());
  const ProgressState::Counts before = s.counts();
  // A valid retirement and an invalid one: neither happens.
  absl::Status st = s.Apply({{T(0, {0}), kForward, -1}, {T(0, {0}), kUpdate, -1}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("((0; 0), location 2)"));
  EXPECT_EQ(s.counts(), before);
  // Structural errors name the pointstamp and change nothing either.
  st = s.Apply({{T(0, {0}), kForward, -1}, {T(0, {0}), 42, +1}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("((0; 0), location 42): unknown location"));
  st = s.Apply({{T(0, {0}), kGossip, +1}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("1 loop counters but the location lies in 2 loops"));
  EXPECT_EQ(s.Apply({{T(0, {-1}), kForward, +1}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.counts(), before);
  // Judged on the sum: +1 then -2 at one pointstamp is -1 against a count of 1, fine;
  // -1 then +1 at an empty one sums to nothing.
  EXPECT_TRUE(s.Apply({{T(0, {0}), kForward, +1}, {T(0, {0}), kForward, -2}}).ok());
  EXPECT_EQ(s.Count(T(0, {0}), kForward), 0);
  EXPECT_TRUE(s.Apply({{T(0, {5}), kUpdate, -1}, {T(0, {5}), kUpdate, +1}}).ok());
  EXPECT_EQ(s.Count(T(0, {5}), kUpdate), 0);
}

TEST(ProgressStateTest, WorkOnlyWhereWorkCouldResultIn) {
  ProgressState s = Fresh();
  // Feedback of step 3 creates work at Forward in step 4, not step 3.
  ASSERT_TRUE(s.Apply({{T(0, {3}), kFeedback, +1}}).ok());  // the input at (0; 0) could result in it
  ASSERT_TRUE(s.Apply({{T(0, {0}), kInput, -1}}).ok());     // the input closes
  absl::Status st = s.Apply({{T(0, {3}), kFeedback, -1}, {T(0, {3}), kForward, +1}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("((0; 3), location 1): created, but no active pointstamp could result in it"));
  // The pointstamp a batch retires justifies what it creates.
  ASSERT_TRUE(s.Apply({{T(0, {3}), kFeedback, -1}, {T(0, {4}), kForward, +1}}).ok());
  // Work in the same batch does not justify itself.
  st = s.Apply({{T(0, {0}), kForward, +1}, {T(0, {0}), kUpdate, +1}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Count(T(0, {0}), kForward), 0);
  // A capability may move forward at its own location, never back.
  ASSERT_TRUE(s.Apply({{T(0, {4}), kForward, -1}, {T(0, {6}), kForward, +1}}).ok());
  EXPECT_EQ(s.Apply({{T(0, {5}), kForward, +1}}).code(), absl::StatusCode::kFailedPrecondition);
  // Once nothing is active, nothing may be created.
  ASSERT_TRUE(s.Apply({{T(0, {6}), kForward, -1}}).ok());
  EXPECT_EQ(s.Apply({{T(0, {9}), kForward, +1}}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ProgressStateTest, FrontierIsTheMinimalTimesThatCouldArrive) {
  ProgressState s = Fresh();
  EXPECT_EQ(s.Frontier(kUpdate).elements(), std::vector<ScopedTimestamp>{T(0, {0})});
  EXPECT_EQ(s.Frontier(kMix).elements(), std::vector<ScopedTimestamp>{T(0, {0, 0})});
  // Round 2 of step 1 at Mix: Gossip may still see round 3 of step 1 or round 0 of
  // step 2, which are incomparable. So the frontier is an antichain of two.
  ASSERT_TRUE(s.Apply({{T(0, {0}), kInput, -1}, {T(0, {1, 2}), kMix, +1}}).ok());
  Antichain<ScopedTimestamp> expected;
  expected.Insert(T(0, {1, 3}));
  expected.Insert(T(0, {2, 0}));
  EXPECT_EQ(s.Frontier(kGossip), expected);
  EXPECT_FALSE(s.IsComplete(T(0, {1, 3}), kGossip));
  EXPECT_TRUE(s.IsComplete(T(0, {1, 2}), kGossip));
  EXPECT_FALSE(s.IsComplete(T(0, {2, 0}), kGossip));
  EXPECT_TRUE(s.IsComplete(T(0, {0}), kUpdate));
  EXPECT_FALSE(s.IsComplete(T(0, {1}), kUpdate));
  EXPECT_TRUE(s.Frontier(kInput).empty());
}

// ---- A random simulation that checks every law after every batch -----------

constexpr int64_t kMaxStep = 5;
constexpr int64_t kMaxRound = 3;

bool InBounds(const ScopedTimestamp& t) {
  return t.epoch <= 1 && t.counters[0] <= kMaxStep && (t.depth() < 2 || t.counters[1] <= kMaxRound);
}

// Every time at `location` with epoch 0..1, step 0..kMaxStep+1 and round 0..kMaxRound+1.
std::vector<ScopedTimestamp> Probes(int depth) {
  std::vector<ScopedTimestamp> out;
  for (int64_t e = 0; e <= 1; ++e) {
    for (int64_t s = 0; s <= kMaxStep + 1; ++s) {
      if (depth == 1) {
        out.push_back(T(e, {s}));
        continue;
      }
      for (int64_t k = 0; k <= kMaxRound + 1; ++k) out.push_back(T(e, {s, k}));
    }
  }
  return out;
}

// One batch an executor might report: run an active pointstamp (retire it,
// create its successors at or above the times its edges give), or with small
// probability a random retirement or creation that the laws may refuse.
std::vector<ProgressDelta> RandomBatch(const ProgressState& s, std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto random_point = [&]() {
    const int loc = Locations()[uniform(0, static_cast<int>(Locations().size()) - 1)];
    std::vector<ScopedTimestamp> probes = Probes(s.reachability().Depth(loc));
    return std::make_pair(probes[uniform(0, static_cast<int>(probes.size()) - 1)], loc);
  };
  std::vector<Pointstamp> active;
  for (const auto& [p, count] : s.counts()) {
    if (count > 0) active.push_back(p);
  }
  const int kind = uniform(0, 9);
  if (active.empty() || kind == 0) {
    auto [t, loc] = random_point();
    return {{t, loc, +1}};
  }
  if (kind == 1) {
    auto [t, loc] = random_point();
    return {{t, loc, -uniform(1, 2)}};
  }
  const Pointstamp q = active[uniform(0, static_cast<int>(active.size()) - 1)];
  std::vector<ProgressDelta> batch = {{q.time, q.location, -1}};
  if (q.location == kInput) {
    if (q.time.counters[0] < kMaxStep) {  // advance the input, maybe into the next epoch
      batch.push_back({T(q.time.epoch + uniform(0, 1), {q.time.counters[0] + 1}), kInput, +1});
      if (!InBounds(batch.back().time)) batch.pop_back();
    }
    batch.push_back({q.time, kForward, +1});
    return batch;
  }
  for (const auto& [from, to, summary] : Edges()) {
    if (from != q.location || uniform(0, 2) == 0) continue;
    ScopedTimestamp t = *summary.ResultsIn(q.time);
    if (uniform(0, 3) == 0) t.counters[uniform(0, t.depth() - 1)] += 1;  // later than it must be: still justified
    if (InBounds(t)) batch.push_back({t, to, +uniform(1, 2)});
  }
  return batch;
}

// Laws checked after every accepted batch, against the state before it.
void CheckLaws(const ProgressState& before, const ProgressState& after,
               std::map<std::pair<int, int>, bool>& was_complete) {
  for (const auto& [p, count] : after.counts()) ASSERT_GT(count, 0) << p;  // CountsNeverNegative
  for (int loc : Locations()) {
    const Antichain<ScopedTimestamp> old_frontier = before.Frontier(loc);
    const Antichain<ScopedTimestamp> frontier = after.Frontier(loc);
    // FrontierNeverMovesBackwards.
    for (const ScopedTimestamp& f : frontier.elements()) {
      ASSERT_TRUE(old_frontier.LessEqual(f)) << "frontier at " << loc << " moved back to " << f;
    }
    // FrontierIsTheMinimalTimesThatCouldArrive: the frontier's upward closure is
    // exactly the times some active pointstamp could result in; its elements could arrive.
    for (const ScopedTimestamp& f : frontier.elements()) ASSERT_TRUE(after.CouldArrive({f, loc})) << f;
    const std::vector<ScopedTimestamp> probes = Probes(after.reachability().Depth(loc));
    for (size_t i = 0; i < probes.size(); ++i) {
      const bool complete = after.IsComplete(probes[i], loc);
      ASSERT_EQ(complete, !frontier.LessEqual(probes[i])) << probes[i] << " at " << loc;
      // CompletionIsPermanent.
      bool& was = was_complete[{loc, static_cast<int>(i)}];
      ASSERT_TRUE(complete || !was) << probes[i] << " at " << loc << " un-completed";
      was = complete;
    }
  }
}

TEST(ProgressStateTest, FrontierNeverMovesBackwards) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    ProgressState s = Fresh();
    std::map<std::pair<int, int>, bool> was_complete;
    int accepted = 0;
    int refused = 0;
    for (int op = 0; op < 400 && !s.counts().empty(); ++op) {
      const std::vector<ProgressDelta> batch = RandomBatch(s, rng);
      // The model: every sum non-negative, every positive sum could arrive.
      std::map<Pointstamp, int64_t, PointstampKeyLess> net;
      for (const ProgressDelta& d : batch) net[{d.time, d.location}] += d.delta;
      bool expect_ok = true;
      for (const auto& [p, d] : net) {
        if (s.Count(p.time, p.location) + d < 0) expect_ok = false;
        if (d > 0) {
          bool could = false;
          for (const auto& [q, c] : s.counts()) {
            could = could || (c > 0 && s.reachability().CouldResultIn(q.time, q.location, p.time, p.location));
          }
          expect_ok = expect_ok && could;
        }
      }
      const ProgressState before = s;
      absl::Status st = s.Apply(batch);
      ASSERT_EQ(st.ok(), expect_ok) << st;
      if (!st.ok()) {
        ++refused;
        ASSERT_EQ(s.counts(), before.counts()) << "a refused batch changed the counts";
        continue;
      }
      ++accepted;
      CheckLaws(before, s, was_complete);
      if (HasFatalFailure()) return;
    }
    EXPECT_GT(accepted, 100);
    EXPECT_GT(refused, 5);
  }
}

TEST(ProgressStateTest, CompletionIsPermanent) {
  ProgressState s = Fresh();
  // Run one step through the gossip loop by hand.
  ASSERT_TRUE(s.Apply({{T(0, {0}), kInput, -1}, {T(0, {1}), kInput, +1}, {T(0, {0}), kForward, +1}}).ok());
  ASSERT_TRUE(s.Apply({{T(0, {0}), kForward, -1}, {T(0, {0, 0}), kGossip, +1}}).ok());
  ASSERT_TRUE(s.Apply({{T(0, {0, 0}), kGossip, -1}, {T(0, {0, 0}), kMix, +1}}).ok());
  EXPECT_FALSE(s.IsComplete(T(0, {0, 0}), kMix));
  ASSERT_TRUE(s.Apply({{T(0, {0, 0}), kMix, -1}, {T(0, {0, 1}), kGossip, +1}}).ok());
  EXPECT_TRUE(s.IsComplete(T(0, {0, 0}), kMix));  // round 0 is done once round 1 runs
  EXPECT_FALSE(s.IsComplete(T(0, {0}), kUpdate));
  ASSERT_TRUE(s.Apply({{T(0, {0, 1}), kGossip, -1}, {T(0, {0, 1}), kMix, +1}}).ok());
  ASSERT_TRUE(s.Apply({{T(0, {0, 1}), kMix, -1}, {T(0, {0}), kUpdate, +1}}).ok());
  ASSERT_TRUE(s.Apply({{T(0, {0}), kUpdate, -1}}).ok());
  EXPECT_TRUE(s.IsComplete(T(0, {0}), kUpdate));
  // Round 0 of step 0 stays complete, and no batch may bring it back.
  EXPECT_EQ(s.Apply({{T(0, {0, 0}), kMix, +1}}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply({{T(0, {0}), kUpdate, +1}}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.IsComplete(T(0, {0, 0}), kMix));
  EXPECT_TRUE(s.IsComplete(T(0, {0}), kUpdate));
  EXPECT_FALSE(s.IsComplete(T(0, {1}), kUpdate));  // the input at step 1 still could
}

TEST(ProgressStateTest, ApplyRemoteAllowsNegativeCountsAndFrontiersReadPositiveOnes) {
  ProgressState s = Fresh();
  // A peer's retirement before the creation it retires (sent by a third rank).
  ASSERT_TRUE(s.ApplyRemote({{T(0, {2}), kUpdate, -1}}).ok());
  EXPECT_EQ(s.Count(T(0, {2}), kUpdate), -1);
  EXPECT_EQ(s.Frontier(kUpdate).elements(), std::vector<ScopedTimestamp>{T(0, {0})});  // the input's
  ASSERT_TRUE(s.ApplyRemote({{T(0, {2}), kUpdate, +1}}).ok());
  EXPECT_EQ(s.Count(T(0, {2}), kUpdate), 0);
  EXPECT_EQ(s.counts().size(), 1u);
  // Structure is still checked, all or nothing.
  EXPECT_EQ(s.ApplyRemote({{T(0, {2}), kUpdate, -1}, {T(0, {2}), 99, 1}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Count(T(0, {2}), kUpdate), 0);
}

}  // namespace
}  // namespace nereid
