#include "timing/trace_breakdown.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TraceEvent Span(const std::string& cat, const std::string& name, double ts, double dur) {
  TraceEvent e;
  e.phase = 'X';
  e.category = cat;
  e.name = name;
  e.ts_us = ts;
  e.dur_us = dur;
  return e;
}

TraceEvent Async(char phase, const std::string& cat, int64_t id, double ts) {
  TraceEvent e;
  e.phase = phase;
  e.category = cat;
  e.id = id;
  e.ts_us = ts;
  return e;
}

bool AllReduceIsCommunication(const std::string& cat) { return cat == "AllReduce"; }

// Two steps of 1000 us. Step 0: "mm" runs 100 us alone, "relu" 50 us on a
// second thread inside it, then the bucket's AllReduce node (not compute).
// Step 1: a transfer is in flight from 1000 to 1600 us, during which "mm"
// takes 160 us (60 us slowed against its quiet 100) and "tail" runs with no
// quiet run to compare with; the collective thread works 1100-1300 us.
std::vector<TraceEvent> TwoSteps() {
  return {
      Span("step", "step 0", 0, 1000),
      Span("MatMul", "mm", 100, 100),
      Span("Relu", "relu", 150, 50),
      Span("AllReduce", "bucket", 300, 400),
      Async('b', "step", 7, 1000),
      Async('b', "wait", 1, 1000),
      Span("MatMul", "mm", 1050, 160),
      Span("comm", "allreduce bucket 0", 1100, 200),
      Span("Tail", "tail", 1400, 40),
      Async('e', "wait", 1, 1600),
      Span("wait", "bucket 0 in order", 1700, 10),
      Async('e', "step", 7, 2000),
      Span("eval", "evaluate", 2000, 500000),
      Span("epoch", "epoch 0", 0, 2000),
  };
}

TEST(TraceBreakdownTest, SplitsStepsIntoComputeSlowedAndIdle) {
  const StepBreakdown b = BreakDownSteps(TwoSteps(), AllReduceIsCommunication, /*skip_steps=*/0);
  EXPECT_EQ(b.steps, 2);
  EXPECT_DOUBLE_EQ(b.median_step_ms, 1.0);
  EXPECT_DOUBLE_EQ(b.iteration_ms, 1.0);
  // Compute wall time: 100 (mm, relu inside it) + 160 + 40, over 2 steps.
  EXPECT_DOUBLE_EQ(b.compute_ms, 0.150);
  EXPECT_DOUBLE_EQ(b.idle_ms, 0.850);
  EXPECT_DOUBLE_EQ(b.slowed_ms, 0.030);  // 60 us over 2 steps
  EXPECT_DOUBLE_EQ(b.communication_ms, 0.100);
  EXPECT_DOUBLE_EQ(b.in_flight_ms, 0.300);
  EXPECT_DOUBLE_EQ(b.reorder_ms, 0.005);
  EXPECT_DOUBLE_EQ(b.coverage, 160.0 / 200.0);  // "tail" had no quiet run
  EXPECT_DOUBLE_EQ(b.eval_seconds, 0.5);
}

TEST(TraceBreakdownTest, AFasterRunUnderCommunicationIsNotNegative) {
  std::vector<TraceEvent> events = {Span("step", "s", 0, 500), Span("MatMul", "mm", 0, 100),
                                    Span("comm", "c", 200, 100), Span("MatMul", "mm", 250, 80)};
  const StepBreakdown b = BreakDownSteps(events, AllReduceIsCommunication, 0);
  EXPECT_DOUBLE_EQ(b.slowed_ms, 0);
  EXPECT_DOUBLE_EQ(b.coverage, 1);
}

TEST(TraceBreakdownTest, SkippedStepsAndWhatStartsInThemAreLeftOut) {
  const StepBreakdown b = BreakDownSteps(TwoSteps(), AllReduceIsCommunication, /*skip_steps=*/1);
  EXPECT_EQ(b.steps, 2);
  EXPECT_EQ(b.measured_steps, 1);
  EXPECT_DOUBLE_EQ(b.iteration_ms, 1.0);
  EXPECT_DOUBLE_EQ(b.compute_ms, 0.200);  // 160 + 40 in step 1
  EXPECT_DOUBLE_EQ(b.idle_ms, 0.800);
  EXPECT_DOUBLE_EQ(b.slowed_ms, 0);       // mm's quiet run was in the skipped step
  EXPECT_DOUBLE_EQ(b.coverage, 0);
  EXPECT_DOUBLE_EQ(b.in_flight_ms, 0.600);
  EXPECT_DOUBLE_EQ(b.eval_seconds, 0.5);  // evaluation counts wherever it ran
}

// Pipelined steps overlap: each span is 1.5 iterations long, the window 3.
TEST(TraceBreakdownTest, OverlappingStepsCountTheWindowNotTheirSpans) {
  std::vector<TraceEvent> events = {Span("step", "0", 0, 150), Span("step", "1", 100, 150),
                                    Span("step", "2", 200, 150), Span("MatMul", "mm", 120, 50)};
  const StepBreakdown b = BreakDownSteps(events, AllReduceIsCommunication, 1);
  EXPECT_DOUBLE_EQ(b.iteration_ms, 0.125);  // 100..350 over 2 steps
  EXPECT_DOUBLE_EQ(b.median_step_ms, 0.150);
  EXPECT_DOUBLE_EQ(b.compute_ms, 0.025);
  EXPECT_DOUBLE_EQ(b.idle_ms, 0.100);
}

// Against a reference run every kernel counts, overlapped or not: "mm"
// ran 100 and 160 us against a reference of 80 (20 + 80 slowed), "relu"
// 50 against 50, "tail" has no reference.
TEST(TraceBreakdownTest, AReferenceRunComparesEveryKernel) {
  const std::map<std::string, double> medians = {{"mm", 80}, {"relu", 50}};
  const StepBreakdown b = BreakDownSteps(TwoSteps(), AllReduceIsCommunication, 0, &medians);
  EXPECT_DOUBLE_EQ(b.slowed_ms, 0.050);  // (20 + 80) us over 2 steps
  EXPECT_DOUBLE_EQ(b.coverage, 310.0 / 350.0);
}

TEST(TraceBreakdownTest, AnEmptyTraceHasNoSteps) {
  const StepBreakdown b = BreakDownSteps({}, AllReduceIsCommunication);
  EXPECT_EQ(b.steps, 0);
  EXPECT_DOUBLE_EQ(b.compute_ms, 0);
  EXPECT_DOUBLE_EQ(b.coverage, 1);
}

}  // namespace
}  // namespace nereid
