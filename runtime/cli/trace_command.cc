// nereid trace: what the per-rank traces of a run (`nereid run --trace`) say
// together. `summary` prints a row per rank: steps, the median step, and per
// step the time in node kernels, collectives, reorder waits and transfers in
// flight; `merge` writes one file with a track group per rank, on one clock.

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
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"

namespace nereid {
namespace {

Flags TraceFlags() {
  Flags f("nereid trace summary TRACE...\n       nereid trace merge TRACE... -o OUT",
          "Reads the traces `nereid run --trace PATH` wrote (one per rank: PATH.rank<r>.json).\n"
          "summary: a row per rank: steps, the median step, and per step the time spent in\n"
          "  node kernels (all threads), in collectives, waiting to issue a bucket in order,\n"
          "  and with transfers in flight (asynchronous nodes pending), and in evaluation.\n"
          "merge: one Chrome trace-event file holding every rank (a process per rank), each\n"
          "  shifted onto the earliest file's clock (the ranks of one run share one already).");
  f.Value("o,output", "OUT", "merge: the file to write");
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
      if (e.contains("args") && e["args"].is_object()) t.origin_us = e["args"].value("clock_origin_unix_us", int64_t{0});
    }
  }
  if (t.rank < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no process_name event (not a Nereid trace?)"));
  return t;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Summary(const std::vector<Trace>& traces) {
  std::printf("%-6s %7s %12s %14s %15s %13s %16s %9s\n", "rank", "steps", "step ms", "kernels ms/st",
              "collect. ms/st", "reorder ms/st", "in flight ms/st", "eval s");
  for (const Trace& t : traces) {
    std::vector<double> steps;  // ms
    double kernels = 0, collectives = 0, reorder = 0, in_flight = 0, eval = 0;  // us
    std::map<std::pair<std::string, int64_t>, double> open;  // async begin by (category, id)
    for (const nlohmann::json& e : t.events) {
      if (!e.is_object()) continue;
      const std::string ph = e.value("ph", ""), cat = e.value("cat", "");
      const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
      if (ph == "X") {
        if (cat == "step") {
          steps.push_back(dur / 1000);
        } else if (cat == "comm") {
          collectives += dur;
        } else if (cat == "wait") {
          reorder += dur;
        } else if (cat == "eval") {
          eval += dur;
        } else if (cat != "epoch" && cat != "trace") {
          kernels += dur;  // a node's span; its category is its op
        }
      } else if (ph == "b") {
        open[{cat, e.value("id", int64_t{0})}] = ts;
      } else if (ph == "e") {
        auto it = open.find({cat, e.value("id", int64_t{0})});
        if (it == open.end()) continue;
        const double d = ts - it->second;
        open.erase(it);
        if (cat == "step") steps.push_back(d / 1000);
        if (cat == "wait") in_flight += d;
      }
    }
    const double n = std::max<double>(1, static_cast<double>(steps.size()));
    std::printf("%-6lld %7zu %12.3f %14.3f %15.3f %13.3f %16.3f %9.2f\n", static_cast<long long>(t.rank),
                steps.size(), Median(steps), kernels / 1000 / n, collectives / 1000 / n, reorder / 1000 / n,
                in_flight / 1000 / n, eval / 1e6);
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
      std::fprintf(stderr, "error: %s and %s are both rank %lld: traces of different runs?\n",
                   ranks[t.rank].c_str(), t.path.c_str(), static_cast<long long>(t.rank));
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
  if (parsed.ok() && ((what != "summary" && what != "merge") || positional.size() < 2 ||
                      (what == "merge") != flags.Has("output"))) {
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
  return what == "summary" ? Summary(traces) : Merge(traces, flags.String("output"));
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"trace", "summarise or merge the per-rank traces of a run",
                                [] { return TraceFlags().Help(); }, TraceCommand});

}  // namespace nereid
