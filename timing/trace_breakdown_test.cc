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

TraceEvent OnTrack(const std::string& track, const std::string& cat, double ts, double dur) {
  TraceEvent e = Span(cat, "work", ts, dur);
  e.track = track;
  return e;
}

// Two steps of 1000 us. Step 0 (measured, skip 0): compute0 runs 100-400 and
// 500-600, compute1 300-700, the copy stream 650-750; the host waits twice.
// Step 1: compute0 alone, 1100-1200.
TEST(TraceBreakdownTest, DeviceStreamsBusyOverlapAndIdle) {
  const std::vector<TraceEvent> events = {
      Span("step", "step 0", 0, 1000),
      Span("step", "step 1", 1000, 1000),
      OnTrack("sim:0/compute0", "kernel", 100, 300),
      OnTrack("sim:0/compute0", "kernel", 500, 100),
      OnTrack("sim:0/compute1", "kernel", 300, 400),
      OnTrack("sim:0/copy_out", "copy", 650, 100),
      Span("sync", "wait for x/to_host", 700, 60),
      Span("sync", "synchronize", 950, 40),
      OnTrack("sim:0/compute0", "kernel", 1100, 100),
      Span("Relu", "a host node", 200, 10),  // not a stream's
  };
  const DeviceBreakdown d = BreakDownStreams(events, /*skip_steps=*/0);
  ASSERT_EQ(d.streams.size(), 3u);
  const StreamBreakdown& c0 = d.streams[0];
  const StreamBreakdown& c1 = d.streams[1];
  const StreamBreakdown& copy = d.streams[2];
  EXPECT_EQ(c0.track, "sim:0/compute0");
  EXPECT_EQ(copy.track, "sim:0/copy_out");
  // Per step (2 measured): compute0 busy 500 us, 200 of it beside compute1
  // (300-400 and 500-600).
  EXPECT_DOUBLE_EQ(c0.busy_ms, 0.25);
  EXPECT_DOUBLE_EQ(c0.kernel_ms, 0.25);
  EXPECT_DOUBLE_EQ(c0.overlap_ms, 0.1);
  EXPECT_DOUBLE_EQ(c0.idle_ms, 0.75);
  // compute1 (300-700) beside compute0's 300-400 and 500-600 and the copy's 650-700.
  EXPECT_DOUBLE_EQ(c1.overlap_ms, 0.125);
  EXPECT_DOUBLE_EQ(copy.copy_ms, 0.05);
  EXPECT_DOUBLE_EQ(copy.kernel_ms, 0);
  EXPECT_DOUBLE_EQ(copy.overlap_ms, 0.025);  // 650-700 beside compute1
  EXPECT_DOUBLE_EQ(d.host_waits, 1);
  EXPECT_DOUBLE_EQ(d.host_wait_ms, 0.05);
  // The host's wait is bookkeeping, not compute, in the steps' breakdown.
  EXPECT_DOUBLE_EQ(BreakDownSteps(events, AllReduceIsCommunication, 0).compute_ms, (600.0 + 100) / 2 / 1000);
}

}  // namespace
}  // namespace nereid
