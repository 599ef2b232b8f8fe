#ifndef NEREID_TIMING_TRACE_BREAKDOWN_H_
#define NEREID_TIMING_TRACE_BREAKDOWN_H_

// Where one rank's steps went, from its trace (`nereid run --trace`,
// core/trace.h): the time computing, the compute that communication took
// (kernels slowed while transfers ran on the same cores), and the waiting.
//
// The trace's spans, by category:
//   "step"            a training step (X, or a b/e pair)
//   "comm"            the collective thread moving a bucket (X)
//   "wait"            X: a bucket waiting for its turn to be issued (reorder);
//                     b/e: a transfer in flight (issued, not yet done)
//   "eval"            evaluation (X)
//   "kernel", "copy"  a device stream's kernel and copy (X, on the stream's
//                     track): the kernels are compute, the copies not
//   "sync"            the host waiting for the device (X)
//   "epoch", "trace"  bookkeeping, ignored
//   anything else     a node's kernel (X), the category its op; ops that
//                     communicate (`is_communication_op`) are not compute.
//
// Compute is the wall time with at least one compute kernel running (the
// union over threads); idle is the rest of the step. "Slowed" compares each
// compute kernel that ran while communication was active (a "comm" span or
// a transfer in flight) with the median of the same node's runs while none
// was: the excess is compute that communication's CPU (the transport's
// threads, the kernel's network stack, the codecs) took from the step. A
// node that never ran quietly has nothing to compare with; `coverage` says
// what share of the overlapped compute had a baseline.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace nereid {

struct TraceEvent {
  char phase = 'X';  // 'X' (complete), 'b' / 'e' (async begin / end)
  std::string category, name;
  std::string track;  // the named track it lies on ("sim:0/compute0"), or empty
  double ts_us = 0, dur_us = 0;  // dur for 'X' only
  int64_t id = 0;                // pairs 'b' with 'e' (within a category)
};

struct StepBreakdown {
  int64_t steps = 0;           // in the trace
  int64_t measured_steps = 0;  // after the skipped ones
  double median_step_ms = 0;
  // Means per measured step, in milliseconds. An iteration: the time from
  // the first measured step's start to the last step's end, over the
  // measured steps (pipelined steps overlap: their spans are longer).
  double iteration_ms = 0;
  double compute_ms = 0;        // wall time with a compute kernel running
  double slowed_ms = 0;         // part of compute_ms: the excess under communication
  double idle_ms = 0;           // iteration_ms - compute_ms
  double communication_ms = 0;  // the collective thread's "comm" spans
  double in_flight_ms = 0;      // transfers pending (sum over transfers)
  double reorder_ms = 0;
  double coverage = 1;  // share of overlapped compute time with a quiet baseline
  double eval_seconds = 0;
};

// The first `skip_steps` steps (start-up: connecting, first touches of
// memory) are left out, with every span that starts before they end.
//
// With `reference` (node name -> its median kernel time in microseconds,
// from another run: a one-worker trace's profile, trace_profile.h, what
// `nereid model` takes as compute), every compute kernel is compared with the reference,
// not only those under communication: the slowdown from everything this run
// adds (communication's CPU, other ranks on the same cores).
StepBreakdown BreakDownSteps(const std::vector<TraceEvent>& events,
                             const std::function<bool(const std::string& category)>& is_communication_op,
                             int skip_steps = 1, const std::map<std::string, double>* reference = nullptr);

// Where a placed plan's device streams spent the steps (schedulers/
// device_streams.h records a track per stream): per stream and per measured
// step, the wall time it was busy (its kernels and copies), the part of that
// while another stream of the device was busy too (their overlap), and the
// rest of the iteration it sat idle; and how often, and how long, the host
// waited for the device.
struct StreamBreakdown {
  std::string track;  // "sim:0/compute0"
  double busy_ms = 0, kernel_ms = 0, copy_ms = 0, overlap_ms = 0, idle_ms = 0;
};
struct DeviceBreakdown {
  std::vector<StreamBreakdown> streams;  // by track name
  double host_waits = 0;                 // per measured step
  double host_wait_ms = 0;
};
DeviceBreakdown BreakDownStreams(const std::vector<TraceEvent>& events, int skip_steps = 1);

}  // namespace nereid

#endif  // NEREID_TIMING_TRACE_BREAKDOWN_H_
