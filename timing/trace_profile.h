#ifndef NEREID_TIMING_TRACE_PROFILE_H_
#define NEREID_TIMING_TRACE_PROFILE_H_

// The inputs `nereid model` reads from JSON files: a compute profile from a
// trace that `nereid run --trace` wrote (core/trace.h), and the link's
// alpha and beta from `nereid bench allreduce --json` (allreduce_bench.h).
//
// A profile takes, from a one-worker trace:
//   - the steps: the driver's "X" spans of category "step", in time order; the
//     first `warmup_steps` are skipped (at most half of them, so a short trace
//     still has steps to measure), and step_seconds is the median duration of
//     the rest: the compute time of one step, data loading included;
//   - the nodes: every other "X" span (the executor's: name = node, category =
//     op) that starts inside a measured step; a node's time in a step is the
//     sum of its spans there, and its time is the median over the steps it ran
//     in. Spans of categories "eval", "comm" and "wait", and async pairs, are
//     not node compute. With several threads nodes overlap, so the nodes' sum
//     may exceed the step.
// A trace that holds communication (category "comm", async "wait" pairs or
// AllReduce nodes) comes from a multi-worker run: its steps include
// communication, which the profile reports (has_communication) so the caller
// can warn.
//
// Both readers parse with protobuf's JSON parser into google.protobuf.Value
// (strict JSON; nesting is bounded) after refusing files over max_bytes;
// malformed input is an InvalidArgument naming the file and what is wrong.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "timing/timing_model.h"

namespace nereid {

struct TraceProfileOptions {
  int warmup_steps = 5;
  int64_t max_bytes = int64_t{256} << 20;  // a 30-step lenet trace is ~0.3 MB
};

struct NodeTime {
  std::string name;
  std::string op;
  double median_seconds = 0;
  // When its output is ready: the median over the measured steps of the time
  // from the step's start to the end of the node's last span in it. The
  // timing model starts a gradient bucket's allreduce once all of its
  // producers have ended.
  double median_end_seconds = 0;
  double median_end_fraction = 0;  // the same, as a fraction of each step's duration
  int steps = 0;                   // measured steps it ran in
};

struct TraceProfile {
  int total_steps = 0;
  int warmup_steps = 0;  // skipped
  int measured_steps = 0;
  double step_seconds = 0;      // median step duration
  std::vector<double> measured_step_seconds;  // every measured step, in order
  double node_seconds = 0;      // sum of the nodes' medians
  std::vector<NodeTime> nodes;  // largest median first
  bool has_communication = false;
};

// `json` is the trace's text; `label` names it in errors.
absl::StatusOr<TraceProfile> ProfileTrace(absl::string_view json, absl::string_view label,
                                          const TraceProfileOptions& options = {});
absl::StatusOr<TraceProfile> ReadTraceProfile(const std::string& path, const TraceProfileOptions& options = {});
// Several traces taken together (one-worker runs sharing the cores as a
// cluster's ranks will): their measured steps pooled (step_seconds is the
// pooled median, the step counts are sums, has_communication if any has),
// the nodes of the first. At least one path.
absl::StatusOr<TraceProfile> ReadTraceProfiles(const std::vector<std::string>& paths,
                                               const TraceProfileOptions& options = {});

// f_b of each gradient bucket (TimingInputs::bucket_ready_fraction), given
// the nodes producing its inputs: the latest median_end_fraction among them
// (per step, so that steps slowed as a whole do not skew it). A producer the
// profile lacks makes its bucket 1 (ready at the step's end, no overlap) and
// is appended to `missing`.
std::vector<double> BucketReadyFractions(const TraceProfile& profile,
                                         const std::vector<std::vector<std::string>>& producers,
                                         std::vector<std::string>* missing);

// The link from a `nereid bench allreduce --json` report (gamma is left 0):
//   kProbe: its alpha_seconds and beta_bytes_per_second, the link itself
//           (a 4-byte round trip and a 16 MiB one-way transfer);
//   kFit:   alpha and beta fitted (least squares) to the allreduce times it
//           measured through Nereid's communicator, t(S) = 2(n-1) alpha +
//           2(n-1)/n * S / beta over its sizes S (n = its "world"; at least two
//           sizes): the link as the implementation sees it, per-call overheads
//           and the summing included. An intercept below 0 is taken as alpha = 0.
//           The smallest size's time over its 2(n-1) steps is the link's
//           min_step_seconds: no ring step is priced below it (measure from
//           a size no larger than the smallest message a plan sends).
// Either way, when the report has them, the host side too: its
// comm_cpu_seconds_per_byte and cores_per_rank (LinkModel's
// cpu_seconds_per_byte_sent and cores_per_worker).
enum class BenchLink { kProbe, kFit };
absl::StatusOr<LinkModel> ParseBenchLink(absl::string_view json, absl::string_view label,
                                         BenchLink source = BenchLink::kProbe);
absl::StatusOr<LinkModel> ReadBenchLink(const std::string& path, BenchLink source = BenchLink::kProbe,
                                        int64_t max_bytes = int64_t{16} << 20);

}  // namespace nereid

#endif  // NEREID_TIMING_TRACE_PROFILE_H_
