// nereid trace: what the per-rank traces of a run (`nereid run --trace`) say
// together. `summary` prints a row per rank: steps, and per iteration where
// the time went (timing/trace_breakdown.h): computing, the compute that
// communication took, idle, the collective thread's work, transfers in
// flight, reorder waits; `merge` writes one file with a track group per rank,
// on one clock.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file_io.h"
#include "core/json.h"
#include "ops/op_registry.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "timing/trace_breakdown.h"
#include "timing/trace_profile.h"

namespace nereid {
namespace {

Flags TraceFlags() {
  Flags f("nereid trace summary TRACE...\n       nereid trace merge TRACE... -o OUT",
          "Reads the traces `nereid run --trace PATH` wrote (one per rank: PATH.rank<r>.json).\n"
          "summary: a row per rank: steps, and per iteration after the first step: its time,\n"
          "  compute (wall time with a kernel computing), slowed (compute beyond each node's own\n"
          "  median when no communication ran: what communication's CPU took from it), idle (the\n"
          "  rest), the collective thread's work, transfers in flight, waits to issue a bucket in\n"
          "  order; and the time in evaluation.\n"
          "merge: one Chrome trace-event file holding every rank (a process per rank), each\n"
          "  shifted onto the earliest file's clock (the ranks of one run share one already).");
  f.Value("o,output", "OUT", "merge: the file to write");
  f.Value("reference", "TRACE",
          "summary: a one-worker trace of the same model and batch (`nereid run --trace`):\n"
          "slowed then compares every kernel with that run's median for its node, so it\n"
          "counts all the compute this run lost (communication's CPU, other ranks on the\n"
          "same cores) against the compute `nereid model` assumes");
  return f;
}

constexpr uintmax_t kMaxTraceBytes = uintmax_t{256} << 20;

struct Trace {
  std::string path;
  int64_t rank = -1;
  int64_t origin_us = 0;  // clock_origin_unix_us, 0 if absent
  nlohmann::json events;
};

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return absl::NotFoundError(absl::StrCat(path, ": ", error.message()));
  if (size > kMaxTraceBytes) return absl::InvalidArgumentError(absl::StrCat(path, ": over 256 MiB"));
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a trace-event file ({\"traceEvents\": [...]})"));
  }
  Trace t;
  t.path = path;
  t.events = std::move(doc["traceEvents"]);
  for (const nlohmann::json& e : t.events) {
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      t.rank = e.value("pid", int64_t{-1});
      if (e.contains("args") && e["args"].is_object())
        t.origin_us = e["args"].value("clock_origin_unix_us", int64_t{0});
    }
  }
  if (t.rank < 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": no process_name event (not a Nereid trace?)"));
  return t;
}

// Nodes of ops that talk to other ranks (collectives, point-to-point
// transfers) wait for their peers: not compute.
bool IsCommunicationOp(const std::string& category) {
  const OpDef* def = OpRegistry::Global().Find(category);
  return def != nullptr && (def->collective || def->FindAttr("peer") != nullptr);
}

std::vector<TraceEvent> Events(const Trace& t) {
  std::map<int64_t, std::string> tracks;  // tid -> the track's name
  for (const nlohmann::json& e : t.events) {
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && e.contains("args") &&
        e["args"].is_object()) {
      tracks[e.value("tid", int64_t{-1})] = e["args"].value("name", "");
    }
  }
  std::vector<TraceEvent> events;
  for (const nlohmann::json& e : t.events) {
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    if (ph != "X" && ph != "b" && ph != "e") continue;
    TraceEvent event;
    event.phase = ph[0];
    event.category = e.value("cat", "");
    event.name = e.value("name", "");
    event.ts_us = e.value("ts", 0.0);
    event.dur_us = e.value("dur", 0.0);
    event.id = e.value("id", int64_t{0});
    if (auto track = tracks.find(e.value("tid", int64_t{-1})); track != tracks.end()) event.track = track->second;
    events.push_back(std::move(event));
  }
  return events;
}

// `reference`: node name -> median kernel time (us), or null.
int Summary(const std::vector<Trace>& traces, const std::string& reference_path,
            const std::map<std::string, double>* reference) {
  std::printf("%-5s %6s %9s %11s %10s %8s %9s %10s %10s %8s\n", "rank", "steps", "iter. ms", "compute ms", "slowed ms",
              "idle ms", "comm ms", "flight ms", "reorder ms", "eval s");
  double coverage = 1;
  for (const Trace& t : traces) {
    const StepBreakdown b = BreakDownSteps(Events(t), IsCommunicationOp, 1, reference);
    coverage = std::min(coverage, b.coverage);
    std::printf("%-5lld %6lld %9.3f %11.3f %10.3f %8.3f %9.3f %10.3f %10.3f %8.2f\n", static_cast<long long>(t.rank),
                static_cast<long long>(b.steps), b.iteration_ms, b.compute_ms, b.slowed_ms, b.idle_ms,
                b.communication_ms, b.in_flight_ms, b.reorder_ms, b.eval_seconds);
  }
  std::printf(
      "(per iteration, means over the steps after the first; iter.: from the first of those steps' start to\n"
      "the last one's end, over their number (pipelined steps overlap); compute: wall time with a kernel\n"
      "computing; slowed: its part beyond each node's median time\n"
      "%s\n(%.0f%% of the kernel time had a median to compare with);\n"
      "idle: iter. - compute; comm: the collective thread's work; flight: transfers pending, summed\n"
      "over transfers)\n",
      reference != nullptr ? absl::StrCat("in ", reference_path, ", all the compute this run lost").c_str()
                           : "while no communication ran, the compute that communication's CPU use took",
      coverage * 100);
  // A placed plan's device streams, where the trace has them.
  bool header = false;
  for (const Trace& t : traces) {
    const DeviceBreakdown d = BreakDownStreams(Events(t), 1);
    if (d.streams.empty()) continue;
    if (!header) {
      std::printf("\n%-5s %-18s %8s %10s %8s %11s %8s\n", "rank", "device stream", "busy ms", "kernel ms", "copy ms",
                  "overlap ms", "idle ms");
      header = true;
    }
    for (const StreamBreakdown& s : d.streams) {
      std::printf("%-5lld %-18s %8.3f %10.3f %8.3f %11.3f %8.3f\n", static_cast<long long>(t.rank), s.track.c_str(),
                  s.busy_ms, s.kernel_ms, s.copy_ms, s.overlap_ms, s.idle_ms);
    }
    std::printf("%-5lld host waits for the device: %.1f per step, %.3f ms\n", static_cast<long long>(t.rank),
                d.host_waits, d.host_wait_ms);
  }
  if (header) {
    std::printf("(per iteration, as above; busy: wall time with a kernel or copy on the stream; overlap: the part\n"
                "of it while another stream of the device was busy; idle: iter. - busy)\n");
  }
  return kExitOk;
}

int Merge(const std::vector<Trace>& traces, const std::string& out) {
  int64_t origin = traces[0].origin_us;
  for (const Trace& t : traces) {
    if (t.origin_us > 0 && (origin == 0 || t.origin_us < origin)) origin = t.origin_us;
  }
  std::map<int64_t, std::string> ranks;
  nlohmann::json merged = nlohmann::json::array();
  for (const Trace& t : traces) {
    if (!ranks.emplace(t.rank, t.path).second) {
      std::fprintf(stderr, "error: %s and %s are both rank %lld: traces of different runs?\n", ranks[t.rank].c_str(),
                   t.path.c_str(), static_cast<long long>(t.rank));
      return kExitFailure;
    }
    const double shift = t.origin_us > 0 && origin > 0 ? static_cast<double>(t.origin_us - origin) : 0;
    for (nlohmann::json e : t.events) {
      if (e.is_object() && e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift;
      merged.push_back(std::move(e));
    }
  }
  nlohmann::json doc;
  doc["displayTimeUnit"] = "ms";
  doc["traceEvents"] = std::move(merged);
  absl::Status written = WriteFileAtomically(out, doc.dump() + "\n");
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(written.message()).c_str());
    return kExitFailure;
  }
  std::printf("%s: %zu ranks on one clock\n", out.c_str(), traces.size());
  return kExitOk;
}

int TraceCommand(const std::vector<std::string>& args) {
  Flags flags = TraceFlags();
  absl::Status parsed = flags.Parse(args);
  const std::vector<std::string>& positional = flags.positional();
  const std::string what = positional.empty() ? "" : positional[0];
  if (parsed.ok() &&
      ((what != "summary" && what != "merge") || positional.size() < 2 || (what == "merge") != flags.Has("output"))) {
    parsed = absl::InvalidArgumentError(
        "nereid trace summary TRACE..., or nereid trace merge TRACE... -o OUT (see nereid trace --help)");
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  std::vector<Trace> traces;
  for (size_t i = 1; i < positional.size(); ++i) {
    absl::StatusOr<Trace> t = ReadTrace(positional[i]);
    if (!t.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(t.status().message()).c_str());
      return kExitFailure;
    }
    traces.push_back(std::move(*t));
  }
  std::sort(traces.begin(), traces.end(), [](const Trace& a, const Trace& b) { return a.rank < b.rank; });
  if (what != "summary") return Merge(traces, flags.String("output"));
  if (!flags.Has("reference")) return Summary(traces, "", nullptr);
  // The reference's node medians as `nereid model` reads them.
  const std::string path = flags.String("reference");
  absl::StatusOr<TraceProfile> profile = ReadTraceProfile(path);
  if (profile.ok() && profile->has_communication) {
    profile =
        absl::InvalidArgumentError(absl::StrCat(path, " holds communication: the reference is a one-worker trace"));
  }
  if (!profile.ok()) {
    std::fprintf(stderr, "error: --reference: %s\n", std::string(profile.status().message()).c_str());
    return kExitFailure;
  }
  std::map<std::string, double> medians;
  for (const NodeTime& node : profile->nodes) medians[node.name] = node.median_seconds * 1e6;
  return Summary(traces, path, &medians);
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"trace", "summarise or merge the per-rank traces of a run",
                                [] { return TraceFlags().Help(); }, TraceCommand});

}  // namespace nereid
