#ifndef NEREID_CORE_TRACE_H_
#define NEREID_CORE_TRACE_H_

// A timeline of one worker, written as Chrome trace-event JSON (the
// {"traceEvents": [...]} form that Perfetto and chrome://tracing open).
//
// Whoever does something worth seeing records it as a span: the executor each
// node it runs, the collective engine each collective and each wait for the
// next bucket, the trainer each step and evaluation. A span lies on the track
// of the thread that recorded it (tid: a small number per OS thread, in the
// order threads first record), or on a named track of its own (the collective
// engine's), or, when it may overlap others on its track (an asynchronous
// node's wait), on an async track of its own. pid is the worker's rank.
//
// Recording is thread-safe: one mutex-guarded buffer. Whoever holds a null
// recorder records nothing (code tests the pointer; TraceSpan does). The
// buffer is bounded: after `max_events` spans (some 150 bytes each, more for
// long names) the rest are counted, not kept, and the file says so with an
// instant event "trace truncated".
//
//   TraceRecorder trace(/*pid=*/rank);
//   { TraceSpan span(&trace, "step 3", "step", {{"step", 3}}); ... }
//   RETURN_IF_ERROR(trace.WriteJson("trace.json"));

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace nereid {

// An integer argument of an event; `key` must be a string literal.
struct TraceArg {
  const char* key;
  int64_t value;
};

class TraceRecorder {
 public:
  static constexpr int64_t kDefaultMaxEvents = 2000000;
  static constexpr int kMaxArgs = 4;  // more are ignored

  // Timestamps count from now, until SetOrigin says otherwise.
  explicit TraceRecorder(int pid = 0, int64_t max_events = kDefaultMaxEvents);

  // When this recorder started.
  absl::Time start() const { return start_; }
  // Timestamps in the file count from `origin` instead (the ranks of a run
  // agree on one, so their files share a clock); the file's process metadata
  // records it as clock_origin_unix_us.
  void SetOrigin(absl::Time origin);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // A complete event ("ph":"X") from `begin` to `end` on the calling thread's
  // track. Spans on one track must nest.
  void Complete(absl::string_view name, absl::string_view category, absl::Time begin, absl::Time end,
                absl::Span<const TraceArg> args = {});
  // The same on track `tid` (name it with NameTrack; use 1000 and up, clear
  // of the threads' small numbers).
  void CompleteOnTrack(int tid, absl::string_view name, absl::string_view category, absl::Time begin,
                       absl::Time end, absl::Span<const TraceArg> args = {});
  // A span that may overlap others (a pending asynchronous node): a nestable
  // async pair ("ph":"b" and "e") with an id of its own.
  void Async(absl::string_view name, absl::string_view category, absl::Time begin, absl::Time end,
             absl::Span<const TraceArg> args = {});

  // Track names ("thread_name" metadata).
  void NameTrack(int tid, absl::string_view name);
  void NameThisThread(absl::string_view name);

  int64_t recorded() const;
  int64_t dropped() const;

  // The trace so far.
  std::string ToJson() const;
  // ToJson, written atomically (a reader never sees half a file).
  absl::Status WriteJson(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    std::string category;
    char phase;  // 'X', or 'b' for an async pair
    int tid;
    int64_t id;  // async pairs
    int64_t ts_ns, dur_ns;
    std::array<TraceArg, kMaxArgs> args;
    int num_args;
  };
  void Record(int tid, char phase, absl::string_view name, absl::string_view category, absl::Time begin,
              absl::Time end, absl::Span<const TraceArg> args);
  int ThreadTrackLocked();  // the calling thread's tid

  const int pid_;
  const int64_t max_events_;
  const absl::Time start_;
  mutable std::mutex mu_;
  absl::Time origin_;
  std::vector<Event> events_;
  std::unordered_map<std::thread::id, int> thread_tids_;
  std::vector<std::pair<int, std::string>> track_names_;
  int64_t dropped_ = 0;
  int64_t truncated_at_ns_ = 0;
};

// Records [construction, destruction or End()) as a complete event on the
// calling thread's track; does nothing with a null recorder (and copies
// nothing: `name` and `category` are read only when recording).
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* trace, const std::string& name, const std::string& category,
            absl::Span<const TraceArg> args = {});
  ~TraceSpan() { End(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  void End();

 private:
  TraceRecorder* trace_;
  std::string name_, category_;
  absl::Time begin_;
  std::array<TraceArg, TraceRecorder::kMaxArgs> args_{};
  int num_args_ = 0;
};

// Where rank `rank` of `workers` writes the trace asked for at `path`: `path`
// itself for one worker, else with ".rank<r>" before the extension
// (trace.json -> trace.rank1.json; trace -> trace.rank1).
std::string TracePathForRank(const std::string& path, int rank, int workers);

}  // namespace nereid

#endif  // NEREID_CORE_TRACE_H_
