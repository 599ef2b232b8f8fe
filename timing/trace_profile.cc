#include "timing/trace_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/stats.h"

namespace nereid {
namespace {

using Value = Json;  // a parsed JSON value (nlohmann-json, as everywhere)

// JSON nesting deeper than this is refused before parsing (a trace nests 3
// deep: document, event list, event, args).
constexpr int kMaxDepth = 64;

absl::Status Invalid(absl::string_view label, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(label, ": ", what));
}

// The deepest nesting of [ and { outside strings; stops counting past kMaxDepth.
int NestingDepth(absl::string_view json) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

absl::StatusOr<Value> ParseJson(absl::string_view json, absl::string_view label) {
  if (NestingDepth(json) > kMaxDepth) return Invalid(label, absl::StrCat("JSON nested deeper than ", kMaxDepth));
  try {
    return Value::parse(json.begin(), json.end());
  } catch (const Value::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ...": keep what follows the tag.
    std::string message = e.what();
    size_t tag_end = message.find("] ");
    return Invalid(label, absl::StrCat("not valid JSON: ",
                                       tag_end == std::string::npos ? message : message.substr(tag_end + 2)));
  }
}

absl::StatusOr<std::string> ReadBounded(const std::string& path, int64_t max_bytes) {
  std::error_code ec;
  uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", ec.message()));
  if (size > static_cast<uintmax_t>(max_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", size, " bytes; files over ", max_bytes, " bytes are refused"));
  }
  return ReadFileToString(path);
}

// The member `key` of an object, or null (also when `s` is not an object).
const Value* Field(const Value& s, const char* key) {
  if (!s.is_object()) return nullptr;
  auto it = s.find(key);
  return it == s.end() ? nullptr : &*it;
}

std::string StringField(const Value& s, const char* key) {
  const Value* v = Field(s, key);
  return v != nullptr && v->is_string() ? v->get_ref<const std::string&>() : "";
}

// A finite number, or an error naming the event and the field.
absl::StatusOr<double> NumberField(const Value& s, const char* key, absl::string_view label, int index) {
  const Value* v = Field(s, key);
  if (v == nullptr || !v->is_number() || !std::isfinite(v->get<double>())) {
    return Invalid(label,
                   absl::StrCat("event ", index, " (\"", StringField(s, "name"), "\") has no numeric \"", key, "\""));
  }
  return v->get<double>();
}

struct Span {
  double begin_us, end_us;
};

}  // namespace

absl::StatusOr<TraceProfile> ProfileTrace(absl::string_view json, absl::string_view label,
                                          const TraceProfileOptions& options) {
  absl::StatusOr<Value> doc = ParseJson(json, label);
  if (!doc.ok()) return doc.status();
  // The object form {"traceEvents": [...]} or the bare array form.
  const Value* list = &*doc;
  if (doc->is_object()) list = Field(*doc, "traceEvents");
  if (list == nullptr || !list->is_array()) {
    return Invalid(label, "not a Chrome trace: expected {\"traceEvents\": [...]} or an array of events");
  }
  TraceProfile profile;
  std::vector<Span> steps;
  struct NodeSpan {
    const std::string* name;
    const std::string* op;
    Span span;
  };
  std::vector<NodeSpan> node_spans;
  const auto& events = *list;
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    const Value& ev = events[i];
    if (!ev.is_object()) return Invalid(label, absl::StrCat("event ", i, " is not an object"));
    const Value& e = ev;
    const Value* ph = Field(e, "ph");
    if (ph == nullptr || !ph->is_string()) {
      return Invalid(label, absl::StrCat("event ", i, " has no \"ph\" string"));
    }
    const Value* cat = Field(e, "cat");
    const std::string& category = cat != nullptr && cat->is_string() ? cat->get_ref<const std::string&>() : "";
    if (category == "comm" || category == "wait") profile.has_communication = true;
    const std::string& phase = ph->get_ref<const std::string&>();
    if (phase != "X" || category == "comm" || category == "wait" || category == "eval") continue;
    absl::StatusOr<double> ts = NumberField(e, "ts", label, i), dur = NumberField(e, "dur", label, i);
    if (!ts.ok()) return ts.status();
    if (!dur.ok()) return dur.status();
    if (*dur < 0) return Invalid(label, absl::StrCat("event ", i, " has a negative duration"));
    Span span{*ts, *ts + *dur};
    if (category == "step") {
      steps.push_back(span);
      continue;
    }
    const Value* name = Field(e, "name");
    if (name == nullptr || !name->is_string()) {
      return Invalid(label, absl::StrCat("event ", i, " has no \"name\" string"));
    }
    if (category == "AllReduce") profile.has_communication = true;
    const std::string* op = cat != nullptr && cat->is_string() ? &cat->get_ref<const std::string&>() : nullptr;
    node_spans.push_back({&name->get_ref<const std::string&>(), op, span});
  }
  if (steps.empty()) {
    return Invalid(label, "no step spans (category \"step\"): is it a trace from `nereid run --trace`?");
  }
  std::sort(steps.begin(), steps.end(), [](const Span& a, const Span& b) { return a.begin_us < b.begin_us; });
  profile.total_steps = static_cast<int>(steps.size());
  profile.warmup_steps = std::min(std::max(options.warmup_steps, 0), profile.total_steps / 2);
  profile.measured_steps = profile.total_steps - profile.warmup_steps;
  std::vector<double> step_seconds;
  for (int s = profile.warmup_steps; s < profile.total_steps; ++s) {
    step_seconds.push_back((steps[s].end_us - steps[s].begin_us) * 1e-6);
  }
  profile.step_seconds = Median(step_seconds);
  profile.measured_step_seconds = step_seconds;

  // Node -> (op, seconds per measured step it ran in).
  struct PerNode {
    std::string op;
    std::map<int, double> seconds;  // by step: the node's time in it
    std::map<int, double> end;      // by step: the end of its last span, from the step's start
  };
  std::map<std::string, PerNode> per_node;
  for (const NodeSpan& n : node_spans) {
    // The last step that starts at or before the span; it must also contain it.
    auto after = std::upper_bound(steps.begin(), steps.end(), n.span.begin_us,
                                  [](double t, const Span& s) { return t < s.begin_us; });
    if (after == steps.begin()) continue;
    int s = static_cast<int>(std::prev(after) - steps.begin());
    if (s < profile.warmup_steps || n.span.begin_us > steps[s].end_us) continue;
    PerNode& p = per_node[*n.name];
    if (n.op != nullptr) p.op = *n.op;
    p.seconds[s] += (n.span.end_us - n.span.begin_us) * 1e-6;
    double& end = p.end[s];
    end = std::max(end, (n.span.end_us - steps[s].begin_us) * 1e-6);
  }
  for (auto& [name, p] : per_node) {
    std::vector<double> v, ends, fractions;
    for (const auto& [step, seconds] : p.seconds) v.push_back(seconds);
    for (const auto& [step, end] : p.end) {
      ends.push_back(end);
      double duration = (steps[step].end_us - steps[step].begin_us) * 1e-6;
      fractions.push_back(duration > 0 ? std::min(1.0, end / duration) : 1.0);
    }
    NodeTime t{name, p.op, Median(v), Median(ends), Median(fractions), static_cast<int>(v.size())};
    profile.node_seconds += t.median_seconds;
    profile.nodes.push_back(std::move(t));
  }
  std::stable_sort(profile.nodes.begin(), profile.nodes.end(),
                   [](const NodeTime& a, const NodeTime& b) { return a.median_seconds > b.median_seconds; });
  return profile;
}

std::vector<double> BucketReadyFractions(const TraceProfile& profile,
                                         const std::vector<std::vector<std::string>>& producers,
                                         std::vector<std::string>* missing) {
  std::map<std::string, double> end;
  for (const NodeTime& n : profile.nodes) end[n.name] = n.median_end_fraction;
  std::vector<double> fractions;
  for (const std::vector<std::string>& bucket : producers) {
    double ready = 0;
    for (const std::string& name : bucket) {
      auto it = end.find(name);
      if (it == end.end()) missing->push_back(name);
      ready = std::max(ready, it == end.end() ? 1.0 : it->second);
    }
    fractions.push_back(ready);
  }
  return fractions;
}

absl::StatusOr<TraceProfile> ReadTraceProfile(const std::string& path, const TraceProfileOptions& options) {
  absl::StatusOr<std::string> text = ReadBounded(path, options.max_bytes);
  if (!text.ok()) return text.status();
  return ProfileTrace(*text, path, options);
}

absl::StatusOr<TraceProfile> ReadTraceProfiles(const std::vector<std::string>& paths,
                                               const TraceProfileOptions& options) {
  if (paths.empty()) return absl::InvalidArgumentError("no trace to profile");
  absl::StatusOr<TraceProfile> pooled = ReadTraceProfile(paths[0], options);
  for (size_t i = 1; pooled.ok() && i < paths.size(); ++i) {
    absl::StatusOr<TraceProfile> more = ReadTraceProfile(paths[i], options);
    if (!more.ok()) return more.status();
    pooled->total_steps += more->total_steps;
    pooled->warmup_steps += more->warmup_steps;
    pooled->measured_steps += more->measured_steps;
    pooled->has_communication |= more->has_communication;
    pooled->measured_step_seconds.insert(pooled->measured_step_seconds.end(), more->measured_step_seconds.begin(),
                                         more->measured_step_seconds.end());
  }
  if (pooled.ok()) pooled->step_seconds = Median(pooled->measured_step_seconds);
  return pooled;
}

namespace {

// Least squares of t = a + b S over the report's sizes; then a = 2(n-1) alpha
// and b = 2(n-1) / (n beta).
absl::StatusOr<LinkModel> FitLink(const Value& s, absl::string_view label) {
  const Value* world = Field(s, "world");
  const Value* sizes = Field(s, "sizes");
  if (world == nullptr || !world->is_number() || !(world->get<double>() >= 2) ||
      sizes == nullptr || !sizes->is_array()) {
    return Invalid(label, "no \"world\" >= 2 and \"sizes\" list to fit the link to");
  }
  const double n = world->get<double>();
  std::vector<std::pair<double, double>> points;  // (bytes, seconds)
  for (const Value& row : *sizes) {
    if (!row.is_object()) return Invalid(label, "a \"sizes\" entry is not an object");
    const Value* bytes = Field(row, "bytes");
    const Value* seconds = Field(row, "seconds");
    if (bytes == nullptr || seconds == nullptr || !bytes->is_number() ||
        !seconds->is_number() || !(bytes->get<double>() > 0) || !(seconds->get<double>() > 0) ||
        !std::isfinite(bytes->get<double>()) || !std::isfinite(seconds->get<double>())) {
      return Invalid(label, "a \"sizes\" entry lacks positive \"bytes\" and \"seconds\"");
    }
    points.emplace_back(bytes->get<double>(), seconds->get<double>());
  }
  double mean_s = 0, mean_t = 0;
  for (const auto& [bytes, t] : points) {
    mean_s += bytes / points.size();
    mean_t += t / points.size();
  }
  double sst = 0, sss = 0;
  for (const auto& [bytes, t] : points) {
    sst += (bytes - mean_s) * (t - mean_t);
    sss += (bytes - mean_s) * (bytes - mean_s);
  }
  if (points.size() < 2 || !(sss > 0)) return Invalid(label, "fitting the link needs at least two message sizes");
  double b = sst / sss, a = mean_t - b * mean_s;
  if (a < 0) {  // through the origin instead
    double st = 0, ss = 0;
    for (const auto& [bytes, t] : points) {
      st += bytes * t;
      ss += bytes * bytes;
    }
    a = 0;
    b = st / ss;
  }
  if (!(b > 0)) return Invalid(label, "the allreduce times do not grow with the message size: no bandwidth to fit");
  LinkModel link;
  link.alpha_seconds = a / (2 * (n - 1));
  link.beta_bytes_per_second = 2 * (n - 1) / (n * b);
  // The smallest size's time, per ring step, is a floor under every step.
  link.min_step_seconds = std::min_element(points.begin(), points.end())->second / (2 * (n - 1));
  return link;
}

// The link itself: the report's 4-byte round trip and 16 MiB transfer.
absl::StatusOr<LinkModel> ProbedLink(const Value& s, absl::string_view label) {
  const Value* alpha = Field(s, "alpha_seconds");
  const Value* beta = Field(s, "beta_bytes_per_second");
  if (alpha == nullptr || beta == nullptr || !alpha->is_number() ||
      !beta->is_number()) {
    return Invalid(label,
                   "no numeric alpha_seconds and beta_bytes_per_second: is it from `nereid bench allreduce --json`?");
  }
  LinkModel link;
  link.alpha_seconds = alpha->get<double>();
  link.beta_bytes_per_second = beta->get<double>();
  if (!(std::isfinite(link.alpha_seconds) && link.alpha_seconds >= 0) ||
      !(std::isfinite(link.beta_bytes_per_second) && link.beta_bytes_per_second > 0)) {
    return Invalid(label, absl::StrCat("the link estimate is unusable (alpha ", link.alpha_seconds, " s, beta ",
                                       link.beta_bytes_per_second, " bytes/s)"));
  }
  return link;
}

// The host side of a report, when it has one (older reports do not): the CPU
// per byte sent and the cores per rank.
absl::Status ReadHostSide(const Value& s, absl::string_view label, LinkModel& link) {
  const Value* cpu = Field(s, "comm_cpu_seconds_per_byte");
  const Value* cores = Field(s, "cores_per_rank");
  if (cpu == nullptr || cores == nullptr) return absl::OkStatus();
  if (!cpu->is_number() || !cores->is_number() ||
      !(std::isfinite(cpu->get<double>()) && cpu->get<double>() >= 0) ||
      !(std::isfinite(cores->get<double>()) && cores->get<double>() > 0)) {
    return Invalid(label, "comm_cpu_seconds_per_byte must be a number >= 0 and cores_per_rank one > 0");
  }
  link.cpu_seconds_per_byte_sent = cpu->get<double>();
  link.cores_per_worker = cores->get<double>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LinkModel> ParseBenchLink(absl::string_view json, absl::string_view label, BenchLink source) {
  absl::StatusOr<Value> doc = ParseJson(json, label);
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return Invalid(label, "not a JSON object");
  const Value& s = *doc;
  absl::StatusOr<LinkModel> link = source == BenchLink::kFit ? FitLink(s, label) : ProbedLink(s, label);
  if (!link.ok()) return link.status();
  if (absl::Status host = ReadHostSide(s, label, *link); !host.ok()) return host;
  return link;
}

absl::StatusOr<LinkModel> ReadBenchLink(const std::string& path, BenchLink source, int64_t max_bytes) {
  absl::StatusOr<std::string> text = ReadBounded(path, max_bytes);
  if (!text.ok()) return text.status();
  return ParseBenchLink(*text, path, source);
}

}  // namespace nereid
