#include "core/trace.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/file_io.h"
#include "core/json.h"

namespace nereid {
namespace {

// Trace-event timestamps are microseconds; keep nanosecond precision.
void AppendMicros(std::string* out, int64_t ns) {
  ns = std::max<int64_t>(ns, 0);
  absl::StrAppendFormat(out, "%d.%03d", ns / 1000, ns % 1000);
}

// A JSON string, quoted and escaped (bytes that are not UTF-8 become U+FFFD
// rather than failing the whole trace).
void AppendString(std::string* out, absl::string_view s) {
  *out += JsonQuoted(std::string(s));
}

}  // namespace

TraceRecorder::TraceRecorder(int pid, int64_t max_events)
    : pid_(pid), max_events_(std::max<int64_t>(0, max_events)), start_(absl::Now()), origin_(start_) {}

void TraceRecorder::SetOrigin(absl::Time origin) {
  std::lock_guard<std::mutex> lock(mu_);
  origin_ = origin;
}

int TraceRecorder::ThreadTrackLocked() {
  auto [it, inserted] = thread_tids_.try_emplace(std::this_thread::get_id(), 0);
  if (inserted) it->second = static_cast<int>(thread_tids_.size());
  return it->second;
}

void TraceRecorder::Record(int tid, char phase, absl::string_view name, absl::string_view category,
                           absl::Time begin, absl::Time end, absl::Span<const TraceArg> args) {
  int64_t ts = absl::ToInt64Nanoseconds(begin - start_);
  std::lock_guard<std::mutex> lock(mu_);
  if (tid < 0) tid = ThreadTrackLocked();
  if (static_cast<int64_t>(events_.size()) >= max_events_) {
    if (dropped_++ == 0) truncated_at_ns_ = ts;
    return;
  }
  Event& e = events_.emplace_back();
  e.name = std::string(name);
  e.category = std::string(category);
  e.phase = phase;
  e.tid = tid;
  e.id = static_cast<int64_t>(events_.size());
  e.ts_ns = ts;
  e.dur_ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(end - begin));
  e.num_args = static_cast<int>(std::min<size_t>(args.size(), kMaxArgs));
  std::copy(args.begin(), args.begin() + e.num_args, e.args.begin());
}

void TraceRecorder::Complete(absl::string_view name, absl::string_view category, absl::Time begin, absl::Time end,
                             absl::Span<const TraceArg> args) {
  Record(-1, 'X', name, category, begin, end, args);
}

void TraceRecorder::CompleteOnTrack(int tid, absl::string_view name, absl::string_view category, absl::Time begin,
                                    absl::Time end, absl::Span<const TraceArg> args) {
  Record(tid, 'X', name, category, begin, end, args);
}

void TraceRecorder::Async(absl::string_view name, absl::string_view category, absl::Time begin, absl::Time end,
                          absl::Span<const TraceArg> args) {
  Record(-1, 'b', name, category, begin, end, args);
}

void TraceRecorder::NameTrack(int tid, absl::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [t, n] : track_names_) {
    if (t == tid) {
      n = std::string(name);
      return;
    }
  }
  track_names_.emplace_back(tid, std::string(name));
}

void TraceRecorder::NameThisThread(absl::string_view name) {
  int tid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tid = ThreadTrackLocked();
  }
  NameTrack(tid, name);
}

int64_t TraceRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(events_.size());
}

int64_t TraceRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

std::string TraceRecorder::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  // Every event ends with ",\n" but the last.
  auto head = [&](absl::string_view name, absl::string_view category, char phase, int tid) {
    out += "{\"name\":";
    AppendString(&out, name);
    if (!category.empty()) {
      out += ",\"cat\":";
      AppendString(&out, category);
    }
    absl::StrAppend(&out, ",\"ph\":\"", std::string(1, phase), "\",\"pid\":", pid_, ",\"tid\":", tid);
  };
  head("process_name", "", 'M', 0);
  out += ",\"args\":{\"name\":";
  AppendString(&out, absl::StrCat("rank ", pid_));
  absl::StrAppend(&out, ",\"clock_origin_unix_us\":", absl::ToUnixMicros(origin_), "}}");
  const int64_t shift_ns = absl::ToInt64Nanoseconds(start_ - origin_);  // recorded from start_
  for (const auto& [tid, name] : track_names_) {
    out += ",\n";
    head("thread_name", "", 'M', tid);
    out += ",\"args\":{\"name\":";
    AppendString(&out, name);
    out += "}}";
  }
  auto append_args = [&](const Event& e) {
    out += ",\"args\":{";
    for (int i = 0; i < e.num_args; ++i) {
      if (i > 0) out += ",";
      AppendString(&out, e.args[i].key);
      absl::StrAppend(&out, ":", e.args[i].value);
    }
    out += "}";
  };
  for (const Event& e : events_) {
    out += ",\n";
    head(e.name, e.category, e.phase, e.tid);
    out += ",\"ts\":";
    AppendMicros(&out, e.ts_ns + shift_ns);
    if (e.phase == 'X') {
      out += ",\"dur\":";
      AppendMicros(&out, e.dur_ns);
    } else {
      absl::StrAppend(&out, ",\"id\":", e.id);
    }
    append_args(e);
    out += "}";
    if (e.phase == 'b') {
      // The pair's end.
      out += ",\n";
      head(e.name, e.category, 'e', e.tid);
      out += ",\"ts\":";
      AppendMicros(&out, e.ts_ns + e.dur_ns + shift_ns);
      absl::StrAppend(&out, ",\"id\":", e.id, "}");
    }
  }
  if (dropped_ > 0) {
    out += ",\n";
    head("trace truncated", "trace", 'i', 0);
    out += ",\"s\":\"g\",\"ts\":";
    AppendMicros(&out, truncated_at_ns_ + shift_ns);
    absl::StrAppend(&out, ",\"args\":{\"max_events\":", max_events_, ",\"dropped_events\":", dropped_, "}}");
  }
  out += "\n]}\n";
  return out;
}

absl::Status TraceRecorder::WriteJson(const std::string& path) const { return WriteFileAtomically(path, ToJson()); }

TraceSpan::TraceSpan(TraceRecorder* trace, const std::string& name, const std::string& category,
                     absl::Span<const TraceArg> args)
    : trace_(trace) {
  if (trace_ == nullptr) return;
  name_ = name;
  category_ = category;
  num_args_ = static_cast<int>(std::min<size_t>(args.size(), TraceRecorder::kMaxArgs));
  std::copy(args.begin(), args.begin() + num_args_, args_.begin());
  begin_ = absl::Now();
}

void TraceSpan::End() {
  if (trace_ == nullptr) return;
  trace_->Complete(name_, category_, begin_, absl::Now(), absl::MakeConstSpan(args_.data(), num_args_));
  trace_ = nullptr;
}

std::string TracePathForRank(const std::string& path, int rank, int workers) {
  if (workers <= 1) return path;
  std::filesystem::path p(path);
  std::filesystem::path name = p.filename();
  std::string renamed = absl::StrCat(name.stem().string(), ".rank", rank, name.extension().string());
  return (p.parent_path() / renamed).string();
}

}  // namespace nereid
