#include "timing/trace_breakdown.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/stats.h"

namespace nereid {
namespace {

using Interval = std::pair<double, double>;  // [start, end) in us

// Sorted, disjoint, covering the same time as `spans`.
std::vector<Interval> Merge(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<Interval> merged;
  for (const Interval& s : spans) {
    if (s.second <= s.first) continue;
    if (!merged.empty() && s.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, s.second);
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

double Length(const std::vector<Interval>& merged) {
  double total = 0;
  for (const Interval& s : merged) total += s.second - s.first;
  return total;
}

// Whether [start, end) meets any interval of `merged`.
bool Overlaps(const std::vector<Interval>& merged, double start, double end) {
  auto it = std::upper_bound(merged.begin(), merged.end(), Interval{start, start},
                             [](const Interval& a, const Interval& b) { return a.second < b.second; });
  // `it` is the first interval ending after `start` (or one ending at it).
  for (; it != merged.end() && it->first < end; ++it) {
    if (it->second > start) return true;
  }
  return false;
}

// The steps of a trace and the measured window: from the first measured
// step's start to the last step's end. Pipelined steps overlap, so the
// window over the steps, not their spans, is the time per iteration.
struct StepWindow {
  size_t steps = 0;
  std::vector<double> measured_us;  // the measured steps' spans
  double start = 0, end = 0;
};

StepWindow FindSteps(const std::vector<TraceEvent>& events, int skip_steps) {
  std::vector<Interval> steps;
  std::map<std::pair<std::string, int64_t>, double> open;  // async begins by (category, id)
  for (const TraceEvent& e : events) {
    if (e.category != "step") continue;
    if (e.phase == 'X') steps.push_back({e.ts_us, e.ts_us + e.dur_us});
    if (e.phase == 'b') open[{e.category, e.id}] = e.ts_us;
    if (e.phase == 'e') {
      auto it = open.find({e.category, e.id});
      if (it == open.end()) continue;
      steps.push_back({it->second, e.ts_us});
      open.erase(it);
    }
  }
  std::sort(steps.begin(), steps.end());
  StepWindow w;
  w.steps = steps.size();
  const size_t skipped = std::min(steps.size(), static_cast<size_t>(std::max(0, skip_steps)));
  for (size_t i = skipped; i < steps.size(); ++i) {
    w.measured_us.push_back(steps[i].second - steps[i].first);
    w.end = std::max(w.end, steps[i].second);
  }
  if (skipped < steps.size()) w.start = steps[skipped].first;
  return w;
}

// Spans that are not a node's compute.
bool Bookkeeping(const std::string& cat) {
  return cat == "step" || cat == "comm" || cat == "wait" || cat == "eval" || cat == "epoch" || cat == "trace" ||
         cat == "copy" || cat == "sync";
}

}  // namespace

StepBreakdown BreakDownSteps(const std::vector<TraceEvent>& events,
                             const std::function<bool(const std::string& category)>& is_communication_op,
                             int skip_steps, const std::map<std::string, double>* reference) {
  const StepWindow w = FindSteps(events, skip_steps);
  const double cutoff = w.start, last_end = w.end;
  const std::vector<double>& steps_us = w.measured_us;
  std::map<std::pair<std::string, int64_t>, double> open;  // async begins by (category, id)
  std::vector<Interval> compute, active;  // active: communication running
  std::vector<const TraceEvent*> kernels;
  double communication = 0, in_flight = 0, reorder = 0, eval = 0;
  for (const TraceEvent& e : events) {
    const std::string& cat = e.category;
    if (cat == "step") continue;
    if (e.phase == 'X') {
      if (cat == "eval") {
        eval += e.dur_us;
        continue;
      }
      if (e.ts_us < cutoff || e.ts_us >= last_end) continue;
      const Interval span{e.ts_us, e.ts_us + e.dur_us};
      if (cat == "comm") {
        communication += e.dur_us;
        active.push_back(span);
      } else if (cat == "wait") {
        reorder += e.dur_us;
      } else if (!Bookkeeping(cat) && !is_communication_op(cat)) {
        compute.push_back(span);
        kernels.push_back(&e);
      }
    } else if (e.phase == 'b') {
      open[{cat, e.id}] = e.ts_us;
    } else if (e.phase == 'e') {
      auto it = open.find({cat, e.id});
      if (it == open.end()) continue;
      const Interval span{it->second, e.ts_us};
      open.erase(it);
      if (cat == "wait" && span.first >= cutoff && span.first < last_end) {
        in_flight += span.second - span.first;
        active.push_back(span);
      }
    }
  }
  const std::vector<Interval> busy = Merge(std::move(compute));
  const std::vector<Interval> communicating = Merge(std::move(active));

  // Each node's quiet runs (or the reference), then the excess of its
  // overlapped ones (with a reference: of all).
  std::map<std::string, std::vector<double>> quiet;
  std::vector<const TraceEvent*> overlapped;
  for (const TraceEvent* k : kernels) {
    if (reference != nullptr || Overlaps(communicating, k->ts_us, k->ts_us + k->dur_us)) {
      overlapped.push_back(k);
    } else {
      quiet[k->name].push_back(k->dur_us);
    }
  }
  std::map<std::string, double> baseline;
  if (reference != nullptr) baseline = *reference;
  for (auto& [name, durations] : quiet) baseline[name] = Median(std::move(durations));
  double slowed = 0, compared = 0, overlapped_total = 0;
  for (const TraceEvent* k : overlapped) {
    overlapped_total += k->dur_us;
    auto it = baseline.find(k->name);
    if (it == baseline.end()) continue;
    compared += k->dur_us;
    slowed += std::max(0.0, k->dur_us - it->second);
  }

  StepBreakdown b;
  b.steps = static_cast<int64_t>(w.steps);
  b.measured_steps = static_cast<int64_t>(steps_us.size());
  b.median_step_ms = Median(steps_us) / 1000;
  const double n = std::max<double>(1, static_cast<double>(steps_us.size())) * 1000;  // us -> ms per step
  const double window = steps_us.empty() ? 0 : last_end - cutoff;
  b.iteration_ms = window / n;
  b.compute_ms = Length(busy) / n;
  b.slowed_ms = slowed / n;
  b.idle_ms = std::max(0.0, window - Length(busy)) / n;
  b.communication_ms = communication / n;
  b.in_flight_ms = in_flight / n;
  b.reorder_ms = reorder / n;
  b.coverage = overlapped_total > 0 ? compared / overlapped_total : 1;
  b.eval_seconds = eval / 1e6;
  return b;
}

DeviceBreakdown BreakDownStreams(const std::vector<TraceEvent>& events, int skip_steps) {
  const StepWindow w = FindSteps(events, skip_steps);
  std::map<std::string, std::vector<Interval>> spans;  // by track
  std::map<std::string, StreamBreakdown> streams;
  DeviceBreakdown d;
  for (const TraceEvent& e : events) {
    if (e.phase != 'X' || e.ts_us < w.start || e.ts_us >= w.end) continue;
    if (e.category == "sync") {
      d.host_waits += 1;
      d.host_wait_ms += e.dur_us;
      continue;
    }
    if ((e.category != "kernel" && e.category != "copy") || e.track.empty()) continue;
    StreamBreakdown& s = streams[e.track];
    s.track = e.track;
    (e.category == "kernel" ? s.kernel_ms : s.copy_ms) += e.dur_us;
    spans[e.track].push_back({e.ts_us, e.ts_us + e.dur_us});
  }
  const double n = std::max<double>(1, static_cast<double>(w.measured_us.size()));
  const double window = w.measured_us.empty() ? 0 : w.end - w.start;
  std::map<std::string, std::vector<Interval>> merged;
  for (auto& [track, list] : spans) merged[track] = Merge(std::move(list));
  for (auto& [track, s] : streams) {
    // The others' union, then this stream's time inside it.
    std::vector<Interval> others;
    for (const auto& [other, list] : merged) {
      if (other != track) others.insert(others.end(), list.begin(), list.end());
    }
    others = Merge(std::move(others));
    // Both sorted and disjoint: one sweep.
    double overlap = 0;
    const std::vector<Interval>& mine = merged[track];
    for (size_t i = 0, j = 0; i < mine.size() && j < others.size();) {
      overlap += std::max(0.0, std::min(mine[i].second, others[j].second) - std::max(mine[i].first, others[j].first));
      if (mine[i].second < others[j].second) {
        ++i;
      } else {
        ++j;
      }
    }
    const double busy = Length(merged[track]);
    s.busy_ms = busy / n / 1000;
    s.kernel_ms /= n * 1000;
    s.copy_ms /= n * 1000;
    s.overlap_ms = overlap / n / 1000;
    s.idle_ms = std::max(0.0, window - busy) / n / 1000;
    d.streams.push_back(s);
  }
  d.host_waits /= n;
  d.host_wait_ms /= n * 1000;
  return d;
}

}  // namespace nereid
