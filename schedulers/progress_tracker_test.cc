// Tests for ProgressTracker, one group per law of progress_tracker.h (L1..L7),
// then a differential test against a brute-force model and a multithreaded
// simulation of training steps over a small DAG.

#include "schedulers/progress_tracker.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Step s of a run with 4 steps per epoch (steps count globally).
Timestamp At(int64_t step) { return Timestamp{step / 4, step}; }

// Begins step s, creates one piece of work at `node`, and closes the step-open
// pointstamp: the executor's protocol, steps 2-4.
void BeginWithWork(ProgressTracker& p, int64_t s, int node) {
  ASSERT_TRUE(p.Update(At(s), kStepOpen, +1).ok());
  ASSERT_TRUE(p.Apply({{At(s), node, +1}, {At(s), kStepOpen, -1}}).ok());
}

TEST(ProgressTrackerTest, CreateRefusesNonPositiveWindow) {
  auto zero = ProgressTracker::Create(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("max_steps_in_flight must be >= 1"));
  EXPECT_FALSE(ProgressTracker::Create(-3).ok());
  auto two = ProgressTracker::Create(2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*two)->max_steps_in_flight(), 2);
  EXPECT_EQ(ProgressTracker().max_steps_in_flight(), 1);
}

TEST(ProgressTrackerTest, RefusesBadTimestampsAndLocations) {
  ProgressTracker p;
  EXPECT_EQ(p.Update(Timestamp{0, -1}, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Update(Timestamp{-1, 0}, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Update(At(0), -2, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(p.Update(At(0), 0, 0).ok());  // a zero delta is a no-op
  EXPECT_EQ(p.Frontier(), std::nullopt);
  ASSERT_TRUE(p.Apply({{At(0), kStepOpen, +1}, {At(0), 0, INT64_MAX}}).ok());
  EXPECT_EQ(p.Update(At(0), 0, 1).code(), absl::StatusCode::kInvalidArgument);  // overflow
  EXPECT_EQ(p.Count(At(0), 0), INT64_MAX);
}

// ---- L1: counts never go negative -------------------------------------------

TEST(ProgressTrackerL1, RetiringMoreThanCreatedIsRefusedAndNamesThePointstamp) {
  ProgressTracker p;
  absl::Status s = p.Update(Timestamp{0, 3}, 7, -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((0, 3), node 7)"));
  EXPECT_THAT(s.message(), HasSubstr("negative"));
  EXPECT_EQ(p.Count(Timestamp{0, 3}, 7), 0);

  ASSERT_TRUE(p.Update(At(0), kStepOpen, +2).ok());
  s = p.Update(At(0), kStepOpen, -3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((0, 0), step-open)"));
  EXPECT_EQ(p.Count(At(0), kStepOpen), 2);
}

TEST(ProgressTrackerL1, BatchIsJudgedOnItsSumAndRefusedWhole) {
  ProgressTracker p;
  ASSERT_TRUE(p.Update(At(0), kStepOpen, +1).ok());
  // +1 then -2 at one pointstamp sums to -1: refused, and the other delta too.
  absl::Status s = p.Apply({{At(0), 1, +1}, {At(0), 2, +1}, {At(0), 1, -2}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((0, 0), node 1)"));
  EXPECT_EQ(p.Count(At(0), 1), 0);
  EXPECT_EQ(p.Count(At(0), 2), 0);
  // -1 then +1 at an empty pointstamp sums to zero: nothing to refuse.
  EXPECT_TRUE(p.Apply({{At(0), 3, -1}, {At(0), 3, +1}}).ok());
  EXPECT_EQ(p.Count(At(0), 3), 0);
}

// ---- L2: the frontier never moves backwards ---------------------------------

TEST(ProgressTrackerL2, CreatingBelowTheFrontierIsRefused) {
  ProgressTracker p(2);
  BeginWithWork(p, 0, 1);
  BeginWithWork(p, 1, 1);
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  EXPECT_EQ(p.Frontier(), At(1));
  absl::Status s = p.Update(At(0), 5, +1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((0, 0), node 5)"));
  EXPECT_EQ(p.Frontier(), At(1));
}

TEST(ProgressTrackerL2, NotBackAcrossAnEpochBoundaryOrAnIdlePeriod) {
  ProgressTracker p(1);
  BeginWithWork(p, 3, 1);                                                 // (0, 3)
  ASSERT_TRUE(p.Apply({{At(3), 1, -1}, {Timestamp{1, 4}, 0, +1}}).ok());  // feedback into epoch 1
  EXPECT_EQ(p.Frontier(), (Timestamp{1, 4}));
  // (0, 4) lies after the last step begun, so it is not complete, but below the frontier.
  absl::Status s = p.Update(Timestamp{0, 4}, 0, +1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("before the frontier (1, 4)"));
  // With nothing active there is no frontier, but it still may not come back.
  ASSERT_TRUE(p.Update(Timestamp{1, 4}, 0, -1).ok());
  EXPECT_EQ(p.Frontier(), std::nullopt);
  EXPECT_EQ(p.Update(Timestamp{0, 4}, 0, +1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(p.Update(Timestamp{1, 4}, kStepOpen, +1).ok());
  EXPECT_EQ(p.Frontier(), (Timestamp{1, 4}));
}

TEST(ProgressTrackerL2, CreatingAtACompleteTimeIsRefused) {
  ProgressTracker p;
  BeginWithWork(p, 0, 1);
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  ASSERT_TRUE(p.IsComplete(At(0)));
  EXPECT_EQ(p.Frontier(), std::nullopt);
  absl::Status s = p.Update(At(0), 2, +1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("already complete"));
  EXPECT_TRUE(p.IsComplete(At(0)));
  // Step 1 has not begun, so it is not complete and work may appear there.
  EXPECT_TRUE(p.Update(At(1), 2, +1).ok());
}

TEST(ProgressTrackerL2, FrontierAdvancesThroughSteps) {
  ProgressTracker p(2);
  std::vector<Timestamp> seen;
  auto record = [&] {
    if (auto f = p.Frontier()) seen.push_back(*f);
  };
  BeginWithWork(p, 0, 1);
  record();
  BeginWithWork(p, 1, 1);
  record();
  ASSERT_TRUE(p.Update(At(1), 1, -1).ok());  // step 1 finishes first
  record();
  ASSERT_TRUE(p.Apply({{At(0), 1, -1}, {At(2), 1, +1}}).ok());  // feedback into step 2
  record();
  EXPECT_THAT(seen, ElementsAre(At(0), At(0), At(0), At(2)));
}

// ---- L3: a notification fires exactly once, after completion ----------------

TEST(ProgressTrackerL3, FiresOnceWhenTheStepCompletesNotBefore) {
  ProgressTracker p;
  int fired = 0;
  p.NotifyAt(At(0), [&] { ++fired; });
  EXPECT_EQ(fired, 0);
  ASSERT_TRUE(p.Update(At(0), kStepOpen, +1).ok());
  ASSERT_TRUE(p.Update(At(0), 1, +1).ok());
  ASSERT_TRUE(p.Update(At(0), kStepOpen, -1).ok());
  ASSERT_TRUE(p.Apply({{At(0), 1, -1}, {At(0), 2, +1}}).ok());
  EXPECT_EQ(fired, 0);
  ASSERT_TRUE(p.Update(At(0), 2, -1).ok());
  EXPECT_EQ(fired, 1);
  BeginWithWork(p, 1, 1);
  ASSERT_TRUE(p.Update(At(1), 1, -1).ok());
  EXPECT_EQ(fired, 1);
}

TEST(ProgressTrackerL3, AlreadyCompleteRunsOnTheCallingThreadBeforeReturning) {
  ProgressTracker p;
  BeginWithWork(p, 0, 1);
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  std::thread::id ran_on;
  int fired = 0;
  p.NotifyAt(At(0), [&] {
    ++fired;
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(ProgressTrackerL3, CallbackMayUpdateAndNotify) {
  ProgressTracker p;
  std::vector<std::string> log;
  p.NotifyAt(At(0), [&] {
    log.push_back("step 0 done");
    // Runs outside the lock: begin the next step from the callback.
    EXPECT_TRUE(p.MayBegin(1));
    EXPECT_TRUE(p.Update(At(1), kStepOpen, +1).ok());
    // Registered for a time already complete while a delivery is under way:
    // it runs after this callback returns, before the outer Update returns.
    p.NotifyAt(At(0), [&] { log.push_back("nested"); });
    log.push_back("callback returns");
  });
  BeginWithWork(p, 0, 1);
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  EXPECT_THAT(log, ElementsAre("step 0 done", "callback returns", "nested"));
  EXPECT_EQ(p.LastBegun(), At(1));
}

TEST(ProgressTrackerL3, NeverCompletingTimesNeverFire) {
  auto guard = std::make_shared<int>(0);
  int fired = 0;
  {
    ProgressTracker p;
    BeginWithWork(p, 0, 1);
    p.NotifyAt(At(0), [&fired, guard] { ++fired; });
    p.NotifyAt(At(5), [&fired, guard] { ++fired; });
    EXPECT_EQ(guard.use_count(), 3);
  }  // destroyed with the tracker, un-run
  EXPECT_EQ(fired, 0);
  EXPECT_EQ(guard.use_count(), 1);
}

// ---- L4: notifications fire in timestamp order ------------------------------

TEST(ProgressTrackerL4, FireInTimestampOrderThenRegistrationOrder) {
  ProgressTracker p(3);
  std::vector<std::string> log;
  p.NotifyAt(At(2), [&] { log.push_back("2"); });
  p.NotifyAt(At(0), [&] { log.push_back("0a"); });
  p.NotifyAt(At(1), [&] { log.push_back("1"); });
  p.NotifyAt(At(0), [&] { log.push_back("0b"); });
  p.NotifyAt(At(3), [&] { log.push_back("3"); });
  BeginWithWork(p, 0, 1);
  BeginWithWork(p, 1, 1);
  BeginWithWork(p, 2, 1);
  EXPECT_TRUE(log.empty());
  ASSERT_TRUE(p.Apply({{At(2), 1, -1}, {At(1), 1, -1}, {At(0), 1, -1}}).ok());
  EXPECT_THAT(log, ElementsAre("0a", "0b", "1", "2"));  // step 3 never began
}

TEST(ProgressTrackerL4, CompletingAcrossAnEpochBoundaryKeepsOrder) {
  ProgressTracker p(2);
  std::vector<Timestamp> log;
  for (int64_t s : {4, 3}) p.NotifyAt(At(s), [&log, s] { log.push_back(At(s)); });
  BeginWithWork(p, 3, 1);  // epoch 0
  BeginWithWork(p, 4, 1);  // epoch 1
  ASSERT_TRUE(p.Update(At(4), 1, -1).ok());
  EXPECT_TRUE(log.empty());  // step 3 holds step 4 back
  ASSERT_TRUE(p.Update(At(3), 1, -1).ok());
  EXPECT_THAT(log, ElementsAre(Timestamp{0, 3}, Timestamp{1, 4}));
}

// ---- L5: step s begins only when steps <= s - K are complete -----------------

TEST(ProgressTrackerL5, SynchronousStepsNeverOverlap) {
  ProgressTracker p(1);
  EXPECT_TRUE(p.MayBegin(0));
  BeginWithWork(p, 0, 1);
  EXPECT_FALSE(p.MayBegin(1));
  ASSERT_TRUE(p.Apply({{At(0), 1, -1}, {At(0), 2, +1}}).ok());
  EXPECT_FALSE(p.MayBegin(1));
  ASSERT_TRUE(p.Apply({{At(0), 2, -1}, {At(1), 0, +1}}).ok());  // feedback into step 1
  EXPECT_TRUE(p.MayBegin(1));
  EXPECT_FALSE(p.MayBegin(2));  // step 1 has not begun, so it is not complete
}

TEST(ProgressTrackerL5, PipelinedWindowOfTwo) {
  ProgressTracker p(2);
  EXPECT_TRUE(p.MayBegin(0));
  BeginWithWork(p, 0, 1);
  EXPECT_TRUE(p.MayBegin(1));  // within the first window
  EXPECT_FALSE(p.MayBegin(2));
  BeginWithWork(p, 1, 1);
  ASSERT_TRUE(p.Update(At(1), 1, -1).ok());
  EXPECT_FALSE(p.MayBegin(2));  // step 1 is done, but step 0 is not
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  EXPECT_TRUE(p.MayBegin(2));
  EXPECT_TRUE(p.MayBegin(3));   // steps <= 1 complete
  EXPECT_FALSE(p.MayBegin(4));  // step 2 has not begun
}

TEST(ProgressTrackerL5, TheFirstStepBegunSetsTheBase) {
  ProgressTracker p(1);
  EXPECT_TRUE(p.MayBegin(100));  // resuming from a checkpoint at step 100
  BeginWithWork(p, 100, 1);
  EXPECT_FALSE(p.MayBegin(101));
  ASSERT_TRUE(p.Update(At(100), 1, -1).ok());
  EXPECT_TRUE(p.MayBegin(101));
  EXPECT_TRUE(p.IsComplete(At(99)));  // steps before the base: vacuously complete
}

TEST(ProgressTrackerL5, BeginningOutsideTheWindowIsRefused) {
  ProgressTracker p(1);
  BeginWithWork(p, 0, 1);
  absl::Status s = p.Update(At(1), kStepOpen, +1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((0, 1), step-open)"));
  EXPECT_THAT(s.message(), HasSubstr("may not begin before step 0 completes"));
  EXPECT_EQ(p.LastBegun(), At(0));
  EXPECT_EQ(p.Count(At(1), kStepOpen), 0);
  // Two steps at once from the start would overlap as well.
  ProgressTracker q(1);
  EXPECT_EQ(q.Apply({{At(0), kStepOpen, +1}, {At(1), kStepOpen, +1}}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.LastBegun(), std::nullopt);
}

TEST(ProgressTrackerL5, TwoStepsBegunInOneBatchSetTheBaseAtTheFirst) {
  ProgressTracker p(2);
  ASSERT_TRUE(p.Apply({{At(1), kStepOpen, +1}, {At(0), kStepOpen, +1}}).ok());
  EXPECT_EQ(p.LastBegun(), At(1));
  EXPECT_FALSE(p.MayBegin(2));  // the window is steps 0 and 1
  ASSERT_TRUE(p.Update(At(0), kStepOpen, -1).ok());
  EXPECT_TRUE(p.MayBegin(2));
  EXPECT_FALSE(p.MayBegin(3));
}

TEST(ProgressTrackerL5, WaitToBeginTimesOut) {
  ProgressTracker p(1);
  BeginWithWork(p, 0, 1);
  absl::Status s = p.WaitToBegin(1, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("step 1"));
  EXPECT_EQ(p.WaitToBegin(1, absl::InfinitePast()).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(p.WaitToBegin(0, absl::InfinitePast()).ok());
}

TEST(ProgressTrackerL5, WaitToBeginWakesWhenTheStepCompletes) {
  ProgressTracker p(1);
  BeginWithWork(p, 0, 1);
  absl::Status waited = absl::UnknownError("not run");
  std::thread waiter([&] { waited = p.WaitToBegin(1, absl::InfiniteFuture()); });
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST(ProgressTrackerL5, CancelWakesWaitersAndStays) {
  ProgressTracker p(1);
  BeginWithWork(p, 0, 1);
  absl::Status waited = absl::UnknownError("not run");
  std::thread waiter([&] { waited = p.WaitToBegin(1, absl::Now() + absl::Seconds(60)); });
  p.Cancel();
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(p.MayBegin(0));
  EXPECT_EQ(p.WaitToBegin(0, absl::InfiniteFuture()).code(), absl::StatusCode::kCancelled);
  // Counts and notifications keep working after Cancel.
  int fired = 0;
  p.NotifyAt(At(0), [&] { ++fired; });
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());
  EXPECT_EQ(fired, 1);
}

// ---- L6: a step is not complete before it has begun -------------------------

TEST(ProgressTrackerL6, ZeroCountsAloneProveNothing) {
  ProgressTracker p;
  EXPECT_FALSE(p.IsComplete(At(0)));  // nothing has begun
  ASSERT_TRUE(p.Update(At(0), kStepOpen, +1).ok());
  EXPECT_FALSE(p.IsComplete(At(0)));  // begun, its work not created yet
  ASSERT_TRUE(p.Update(At(0), kStepOpen, -1).ok());
  EXPECT_TRUE(p.IsComplete(At(0)));  // a step with no work at all
  EXPECT_FALSE(p.IsComplete(At(1)));
  EXPECT_FALSE(p.IsComplete(Timestamp{1, 0}));  // later in the lexicographic order
}

TEST(ProgressTrackerL6, StepOpenHoldsTheStepWhileWorkIsCreated) {
  ProgressTracker p;
  ASSERT_TRUE(p.Update(At(0), kStepOpen, +1).ok());
  ASSERT_TRUE(p.Update(At(0), 1, +1).ok());
  ASSERT_TRUE(p.Update(At(0), 1, -1).ok());  // the first node ran before the second was created
  EXPECT_FALSE(p.IsComplete(At(0)));
  EXPECT_EQ(p.Frontier(), At(0));
  ASSERT_TRUE(p.Apply({{At(0), 2, +1}, {At(0), kStepOpen, -1}}).ok());
  EXPECT_FALSE(p.IsComplete(At(0)));
  ASSERT_TRUE(p.Update(At(0), 2, -1).ok());
  EXPECT_TRUE(p.IsComplete(At(0)));
}

TEST(ProgressTrackerL6, WorkAtAStepNotBegunKeepsItIncomplete) {
  ProgressTracker p;
  BeginWithWork(p, 0, 1);
  ASSERT_TRUE(p.Apply({{At(0), 1, -1}, {At(1), 0, +1}}).ok());  // feedback
  EXPECT_TRUE(p.IsComplete(At(0)));
  EXPECT_FALSE(p.IsComplete(At(1)));
  ASSERT_TRUE(p.Update(At(1), 0, -1).ok());
  EXPECT_FALSE(p.IsComplete(At(1)));  // still not begun
  ASSERT_TRUE(p.Update(At(1), kStepOpen, +1).ok());
  ASSERT_TRUE(p.Update(At(1), kStepOpen, -1).ok());
  EXPECT_TRUE(p.IsComplete(At(1)));
}

TEST(ProgressTrackerL6, StepsBeginInOrder) {
  ProgressTracker p(3);
  ASSERT_TRUE(p.Update(Timestamp{1, 5}, kStepOpen, +1).ok());
  absl::Status s = p.Update(Timestamp{2, 3}, kStepOpen, +1);  // later epoch, earlier step
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((2, 3), step-open)"));
  EXPECT_THAT(s.message(), HasSubstr("steps begin in order"));
  EXPECT_EQ(p.Update(Timestamp{1, 7}, kStepOpen, +1).code(), absl::StatusCode::kFailedPrecondition);  // skips 6
  EXPECT_EQ(p.LastBegun(), (Timestamp{1, 5}));
  EXPECT_TRUE(p.Update(Timestamp{2, 6}, kStepOpen, +1).ok());  // the next step, in a new epoch
  EXPECT_EQ(p.LastBegun(), (Timestamp{2, 6}));
  // A second hold on the open step is no new beginning.
  EXPECT_TRUE(p.Update(Timestamp{1, 5}, kStepOpen, +1).ok());
  EXPECT_EQ(p.Count(Timestamp{1, 5}, kStepOpen), 2);
}

TEST(ProgressTrackerL6, WorkOnlyAtStepsBegunOrTheNext) {
  ProgressTracker p(2);
  absl::Status s = p.Update(At(0), 1, +1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no step has begun"));
  ASSERT_TRUE(p.Apply({{At(0), kStepOpen, +1}, {At(0), 1, +1}}).ok());  // begin and create together
  EXPECT_TRUE(p.Update(At(1), 1, +1).ok());                             // the next step
  s = p.Update(At(2), 1, +1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("((0, 2), node 1)"));
  EXPECT_THAT(s.message(), HasSubstr("last step begun is (0, 0)"));
  // Had it been accepted, step 1 could never begin once step 0 finished: it
  // would lie below the frontier (0, 2).
  ASSERT_TRUE(p.Update(At(1), kStepOpen, +1).ok());
  EXPECT_TRUE(p.Update(At(2), 1, +1).ok());
}

// ---- L7: batches are atomic ---------------------------------------------------

TEST(ProgressTrackerL7, HandOffInOneBatchShowsNoGap) {
  ProgressTracker p(1);
  int fired = 0;
  p.NotifyAt(At(0), [&] { ++fired; });
  BeginWithWork(p, 0, 1);
  // Retire node 1 and create node 2 together: were they applied one at a time,
  // step 0 would look complete in between and the notification would fire.
  ASSERT_TRUE(p.Apply({{At(0), 1, -1}, {At(0), 2, +1}}).ok());
  EXPECT_EQ(fired, 0);
  EXPECT_FALSE(p.MayBegin(1));
  // A refused batch changes nothing, also in the deltas that were fine.
  EXPECT_FALSE(p.Apply({{At(0), 2, -1}, {At(0), 3, -1}}).ok());
  EXPECT_EQ(p.Count(At(0), 2), 1);
  EXPECT_EQ(fired, 0);
}

TEST(ProgressTrackerL7, BeginCreateAndCloseInOneBatchBeginsTheStep) {
  ProgressTracker p(1);
  std::vector<int64_t> done;
  p.NotifyAt(At(0), [&] { done.push_back(0); });
  p.NotifyAt(At(1), [&] { done.push_back(1); });
  // The step-open deltas sum to zero, but step 0 has begun.
  ASSERT_TRUE(p.Apply({{At(0), kStepOpen, +1}, {At(0), 1, +1}, {At(0), 2, +1}, {At(0), kStepOpen, -1}}).ok());
  EXPECT_EQ(p.LastBegun(), At(0));
  EXPECT_EQ(p.Count(At(0), kStepOpen), 0);
  EXPECT_FALSE(p.IsComplete(At(0)));
  ASSERT_TRUE(p.Apply({{At(0), 1, -1}, {At(0), 2, -1}}).ok());
  EXPECT_THAT(done, ElementsAre(0));
  // A step with no work at all completes in the batch that begins it.
  ASSERT_TRUE(p.Apply({{At(1), kStepOpen, +1}, {At(1), kStepOpen, -1}}).ok());
  EXPECT_THAT(done, ElementsAre(0, 1));
  EXPECT_TRUE(p.MayBegin(2));
  // Beginning that way is still refused out of the window.
  ASSERT_TRUE(p.Apply({{At(2), kStepOpen, +1}, {At(2), 1, +1}, {At(2), kStepOpen, -1}}).ok());
  absl::Status s = p.Apply({{At(3), kStepOpen, +1}, {At(3), kStepOpen, -1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("may not begin before step 2 completes"));
  EXPECT_EQ(p.LastBegun(), At(2));
}

// ---- Differential test against a brute-force model ---------------------------

// The laws restated by brute force over explicit counts.
struct Model {
  int k = 1;
  std::map<std::pair<Timestamp, int>, int64_t> counts;
  std::optional<Timestamp> last_begun;
  std::optional<int64_t> base;
  std::optional<Timestamp> greatest_frontier;

  std::optional<Timestamp> Frontier() const {
    std::optional<Timestamp> f;
    for (const auto& [ps, c] : counts) {
      if (c > 0 && (!f || ps.first < *f)) f = ps.first;
    }
    return f;
  }
  bool IsComplete(Timestamp t) const {
    if (!last_begun || t > *last_begun) return false;
    for (const auto& [ps, c] : counts) {
      if (c > 0 && ps.first <= t) return false;
    }
    return true;
  }
  bool MayBegin(int64_t s) const { return MayBeginWith(s, base); }
  bool MayBeginWith(int64_t s, std::optional<int64_t> b) const {
    if (!b || s < *b + k) return true;
    if (!last_begun || last_begun->step < s - k) return false;
    for (const auto& [ps, c] : counts) {
      if (c > 0 && ps.first.step <= s - k) return false;
    }
    return true;
  }
  // Whether the batch is acceptable, by L1, L2 and the beginning rule.
  bool Accepts(const std::vector<PointstampDelta>& batch) const {
    std::map<std::pair<Timestamp, int>, int64_t> net;
    std::optional<Timestamp> begun = last_begun;
    std::optional<int64_t> b = base;
    std::vector<Timestamp> opened;
    for (const PointstampDelta& d : batch) {
      net[{d.time, d.location}] += d.delta;
      if (d.location == kStepOpen && d.delta > 0) opened.push_back(d.time);
    }
    std::sort(opened.begin(), opened.end());
    for (const Timestamp& t : opened) {
      if (begun && t <= *begun) continue;
      if (IsComplete(t) || (greatest_frontier && t < *greatest_frontier)) return false;
      if (begun && t.step != begun->step + 1) return false;
      begun = t;
      if (!b) b = t.step;
      if (!MayBeginWith(t.step, b)) return false;
    }
    for (const auto& [ps, d] : net) {
      if (d == 0) continue;
      auto it = counts.find(ps);
      if ((it == counts.end() ? 0 : it->second) + d < 0) return false;
      if (d > 0 && greatest_frontier && ps.first < *greatest_frontier) return false;
      if (d > 0 && IsComplete(ps.first)) return false;
      if (d > 0 && ps.second != kStepOpen && (!begun || ps.first.step > begun->step + 1)) return false;
    }
    return true;
  }
  void Apply(const std::vector<PointstampDelta>& batch) {
    std::vector<Timestamp> opened;
    for (const PointstampDelta& d : batch) {
      counts[{d.time, d.location}] += d.delta;
      if (d.location == kStepOpen && d.delta > 0) opened.push_back(d.time);
    }
    std::sort(opened.begin(), opened.end());
    for (const Timestamp& t : opened) {
      if (!last_begun || t > *last_begun) {
        last_begun = t;
        if (!base) base = t.step;
      }
    }
    if (auto f = Frontier(); f && (!greatest_frontier || *f > *greatest_frontier)) greatest_frontier = f;
  }
};

TEST(ProgressTrackerModelTest, RandomBatchesAgreeWithTheLaws) {
  for (int k : {1, 2, 3}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(testing::Message() << "K=" << k << " seed=" << seed);
      std::mt19937 rng(seed * 7919 + k);
      auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
      ProgressTracker p(k);
      Model m;
      m.k = k;
      struct Note {
        Timestamp t;
        int fired = 0;
      };
      std::vector<Note> notes;
      std::vector<int> fired_now;  // indices into notes, in firing order, per batch
      std::optional<Timestamp> last_frontier;
      std::map<int64_t, bool> was_complete;
      int accepted = 0;
      for (int op = 0; op < 500; ++op) {
        const int64_t hi = m.last_begun ? m.last_begun->step + 2 : 1;
        const int64_t lo = std::max<int64_t>(0, (m.Frontier() ? m.Frontier()->step : hi - 2) - 1);
        if (uniform(0, 5) == 0) {
          const int idx = static_cast<int>(notes.size());
          notes.push_back({At(uniform(static_cast<int>(lo), static_cast<int>(hi)))});
          const bool complete = m.IsComplete(notes.back().t);
          fired_now.clear();
          p.NotifyAt(notes.back().t, [&notes, &fired_now, &p, idx] {
            EXPECT_TRUE(p.IsComplete(notes[idx].t));
            ++notes[idx].fired;
            fired_now.push_back(idx);
          });
          EXPECT_EQ(notes.back().fired, complete ? 1 : 0);
          continue;
        }
        std::vector<PointstampDelta> batch;
        if (uniform(0, 4) == 0) {  // begin the next step, as an executor would
          const int64_t next = m.last_begun ? m.last_begun->step + 1 : 0;
          batch.push_back({At(next), kStepOpen, +1});
          if (uniform(0, 1) == 0) batch.push_back({At(next), uniform(0, 2), +1});
          if (uniform(0, 1) == 0) batch.push_back({At(next), kStepOpen, -1});  // and close it
        }
        const int n = batch.empty() ? uniform(1, 3) : uniform(0, 1);
        for (int i = 0; i < n; ++i) {
          std::vector<std::pair<Timestamp, int>> active;
          for (const auto& [ps, c] : m.counts) {
            if (c > 0) active.push_back(ps);
          }
          if (!active.empty() && uniform(0, 2) != 0) {  // retire something that exists
            const auto& ps = active[uniform(0, static_cast<int>(active.size()) - 1)];
            batch.push_back({ps.first, ps.second, -1});
            continue;
          }
          const int64_t step = uniform(static_cast<int>(lo), static_cast<int>(hi));
          const int location = uniform(-1, 2);
          static constexpr int64_t kDeltas[] = {-2, -1, -1, 1, 1, 2};
          batch.push_back({At(step), location, kDeltas[uniform(0, 5)]});
        }
        const bool accepts = m.Accepts(batch);
        fired_now.clear();
        absl::Status s = p.Apply(batch);
        ASSERT_EQ(s.ok(), accepts) << s;
        if (!s.ok()) {
          EXPECT_TRUE(fired_now.empty());
          continue;
        }
        ++accepted;
        m.Apply(batch);
        // L1 and agreement on every count.
        for (const auto& [ps, c] : m.counts) {
          ASSERT_GE(c, 0);
          ASSERT_EQ(p.Count(ps.first, ps.second), c) << PointstampToString(ps.first, ps.second);
        }
        // L2: the frontier only moves forward.
        const std::optional<Timestamp> f = p.Frontier();
        ASSERT_EQ(f, m.Frontier());
        if (f && last_frontier) {
          ASSERT_GE(*f, *last_frontier);
        }
        if (f) last_frontier = f;
        // L6 and permanence of completion; L5 by brute force.
        for (int64_t step = 0; step <= hi + 2; ++step) {
          const bool complete = p.IsComplete(At(step));
          ASSERT_EQ(complete, m.IsComplete(At(step))) << "step " << step;
          if (was_complete[step]) {
            ASSERT_TRUE(complete) << "step " << step << " un-completed";
          }
          was_complete[step] = complete;
          ASSERT_EQ(p.MayBegin(step), m.MayBegin(step)) << "step " << step;
        }
        // L6: the tracker cannot wedge; only the window (L5) holds the next step back.
        if (m.last_begun) {
          const int64_t next = m.last_begun->step + 1;
          ASSERT_EQ(m.Accepts({{At(next), kStepOpen, +1}}), m.MayBegin(next)) << "step " << next;
        }
        // L3: exactly the notifications for complete times have fired, once.
        for (const Note& note : notes) ASSERT_EQ(note.fired, m.IsComplete(note.t) ? 1 : 0) << note.t;
        // L4: this batch's deliveries in timestamp order, ties by registration.
        for (size_t i = 1; i < fired_now.size(); ++i) {
          const Note& a = notes[fired_now[i - 1]];
          const Note& b = notes[fired_now[i]];
          ASSERT_TRUE(a.t < b.t || (a.t == b.t && fired_now[i - 1] < fired_now[i]));
        }
      }
      // The generator makes progress, not only errors.
      EXPECT_GE(accepted, 60);
      EXPECT_GE(m.last_begun ? m.last_begun->step : 0, 12);
    }
  }
}

// ---- Multithreaded simulation -------------------------------------------------

// Each step runs a small DAG: 0 -> {1, 2} -> 3 -> 4 (Feedback), and the
// feedback creates work at node 5 (the update) in the next step. A driver
// begins steps through WaitToBegin; worker threads run nodes after random
// delays and report each finished node as one atomic batch.
struct SimParams {
  int k;
  uint32_t seed;
};

class ProgressTrackerThreadsTest : public ::testing::TestWithParam<SimParams> {};

TEST_P(ProgressTrackerThreadsTest, StepsStayWithinTheWindowAndNotifyInOrder) {
  const int k = GetParam().k;
  constexpr int kSteps = 32;
  constexpr int kWorkers = 3;
  static const std::vector<std::vector<int>> kSucc = {{1, 2}, {3}, {3}, {4}, {}, {}};
  static constexpr int kPreds[] = {0, 1, 1, 2, 1, 0};
  auto expected_nodes = [](int64_t s) { return s == 0 ? 5 : 6; };

  ProgressTracker tracker(k);
  std::vector<std::atomic<int>> finished(kSteps + 1);  // nodes whose work ran, per step
  for (auto& f : finished) f.store(0);

  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  std::deque<std::pair<int64_t, int>> queue;
  std::map<std::pair<int64_t, int>, int> waiting_preds;
  bool stop = false;
  std::vector<int64_t> fired_order;
  std::vector<int> fired_count(kSteps, 0);
  int max_in_flight = 0;

  auto all_finished_through = [&](int64_t s) {
    for (int64_t i = 0; i <= s; ++i) {
      if (finished[i].load() != expected_nodes(i)) return false;
    }
    return true;
  };

  auto worker = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    while (true) {
      std::pair<int64_t, int> item;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        item = queue.front();
        queue.pop_front();
      }
      const auto [s, node] = item;
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 150)(rng)));
      ++finished[s];  // the node's work, done before it is retired
      std::vector<PointstampDelta> batch = {{At(s), node, -1}};
      std::vector<std::pair<int64_t, int>> enabled;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (int succ : kSucc[node]) {
          auto it = waiting_preds.try_emplace({s, succ}, kPreds[succ]).first;
          if (--it->second == 0) enabled.emplace_back(s, succ);
        }
      }
      if (node == 4) enabled.emplace_back(s + 1, 5);  // Feedback: into the next step
      for (const auto& [es, en] : enabled) batch.push_back({At(es), en, +1});
      absl::Status status = tracker.Apply(batch);
      EXPECT_TRUE(status.ok()) << status;
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& e : enabled) queue.push_back(e);
      cv.notify_all();
    }
  };

  std::atomic<bool> observing{true};
  std::thread observer([&] {
    std::optional<Timestamp> last;
    while (observing.load()) {
      std::optional<Timestamp> f = tracker.Frontier();
      if (f && last) {
        EXPECT_GE(*f, *last) << "L2: the frontier moved back";
      }
      if (f) last = f;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });

  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) workers.emplace_back(worker, GetParam().seed * 31 + w);

  // The driver: ASSERTs return from it, and the threads are joined below either way.
  auto drive = [&] {
    std::mt19937 rng(GetParam().seed);
    for (int64_t s = 0; s < kSteps; ++s) {
      absl::Status waited = tracker.WaitToBegin(s, absl::Now() + absl::Seconds(30));
      ASSERT_TRUE(waited.ok()) << waited;
      {
        // L5: every step <= s - K has finished all its work.
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_TRUE(s - k < 0 || all_finished_through(s - k)) << "step " << s << " began too early";
        int in_flight = 1;
        for (int64_t i = 0; i < s; ++i) in_flight += finished[i].load() != expected_nodes(i);
        max_in_flight = std::max(max_in_flight, in_flight);
      }
      tracker.NotifyAt(At(s), [&, s] {
        const bool done = all_finished_through(s);
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_TRUE(done) << "L3: step " << s << " notified before its work finished";
        fired_order.push_back(s);
        ++fired_count[s];
        cv.notify_all();
      });
      ASSERT_TRUE(tracker.Update(At(s), kStepOpen, +1).ok());
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 50)(rng)));
      ASSERT_TRUE(tracker.Apply({{At(s), 0, +1}, {At(s), kStepOpen, -1}}).ok());
      std::lock_guard<std::mutex> lock(mu);
      queue.emplace_back(s, 0);
      cv.notify_all();
    }
  };
  drive();
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!HasFatalFailure()) {
      EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return fired_order.size() == kSteps; }));
    }
    stop = true;
    cv.notify_all();
  }
  for (std::thread& t : workers) t.join();
  observing.store(false);
  observer.join();

  EXPECT_LE(max_in_flight, k);
  std::vector<int64_t> expected_order(kSteps);
  for (int64_t s = 0; s < kSteps; ++s) expected_order[s] = s;
  EXPECT_EQ(fired_order, expected_order) << "L4: in timestamp order, each once";
  for (int64_t s = 0; s < kSteps; ++s) EXPECT_EQ(fired_count[s], 1) << "step " << s;
  // The last feedback's work at step kSteps ran too; that step never began.
  EXPECT_EQ(tracker.Frontier(), std::nullopt);
  EXPECT_TRUE(tracker.IsComplete(At(kSteps - 1)));
  EXPECT_FALSE(tracker.IsComplete(At(kSteps)));
}

INSTANTIATE_TEST_SUITE_P(Windows, ProgressTrackerThreadsTest,
                         ::testing::Values(SimParams{1, 1}, SimParams{1, 2}, SimParams{2, 1}, SimParams{2, 2},
                                           SimParams{3, 1}, SimParams{3, 2}),
                         [](const ::testing::TestParamInfo<SimParams>& info) {
                           return "K" + std::to_string(info.param.k) + "_seed" + std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace nereid
