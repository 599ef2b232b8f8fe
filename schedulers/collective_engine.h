#ifndef NEREID_SCHEDULERS_COLLECTIVE_ENGINE_H_
#define NEREID_SCHEDULERS_COLLECTIVE_ENGINE_H_

// Issues a worker's collectives in one fixed order on every rank.
//
// The executor finishes gradient buckets in whatever order its thread pool
// happens to run them, which differs between ranks; collectives issued in
// that order would pair bucket 3 on one rank with bucket 4 on another. So
// kernels hand their communication to this engine, keyed by (step, bucket),
// and its one thread runs the work strictly in key order: (s, 0), (s, 1), ...,
// (s, buckets_per_step - 1), (s + 1, 0), ... It waits for the next key when
// it has not arrived yet, and never holds one of the worker's compute cores
// meanwhile, so communication overlaps the rest of the backward pass.
//
// A failure (a collective's error, or Abort from the executor) fails every
// queued and later request with that status, so nothing waits forever.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "core/trace.h"
#include "ops/collective_queue.h"

namespace nereid {

class CollectiveEngine : public CollectiveQueue {
 public:

  // `communicator` must outlive the engine. `timeout` bounds each collective
  // (a dead or stopped peer).
  CollectiveEngine(Communicator* communicator, int buckets_per_step, absl::Duration timeout = absl::Seconds(60));
  ~CollectiveEngine() override;
  CollectiveEngine(const CollectiveEngine&) = delete;
  CollectiveEngine& operator=(const CollectiveEngine&) = delete;

  // The key the engine runs next is (first_step, 0). Call before the first
  // step, with no work queued.
  void Reset(int64_t first_step);

  // Queues `work` for key (step, bucket); `done` gets its status on the
  // engine's thread. Out-of-range keys fail at once.
  void Submit(int64_t step, int bucket, Work work, Done done) override;

  // Fails everything queued and everything submitted later with `status`.
  void Abort(absl::Status status);

  Communicator& communicator() { return *communicator_; }
  int buckets_per_step() const { return buckets_per_step_; }
  absl::Duration timeout() const override { return timeout_; }
  int world() const override { return communicator_->world(); }
  // Time the engine spent inside collectives, and waiting for the next key to
  // be submitted while later keys were queued (the cost of the fixed order).
  absl::Duration busy_time() const;
  absl::Duration reorder_wait_time() const;
  // Of busy_time, the part compressing kernels spent encoding and decoding
  // (they report it with AddCodecTime from inside their work).
  void AddCodecTime(absl::Duration d) override;
  absl::Duration codec_time() const;
  // The (step, bucket) whose collective is running now, if one is: a rank
  // waiting there is waiting for its peers, not hung itself.
  std::optional<std::pair<int64_t, int>> running() const;

  // Records every collective ("comm") and every reorder wait ("wait") on the
  // trace's track kTraceTrack, named "collectives" (null: none). `trace`
  // must outlive the engine or be unset first.
  static constexpr int kTraceTrack = 1000;
  void set_trace(TraceRecorder* trace);

 private:
  struct Request {
    Work work;
    Done done;
  };
  void Loop();

  Communicator* communicator_;
  const int buckets_per_step_;
  const absl::Duration timeout_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::pair<int64_t, int>, Request> queue_;
  std::pair<int64_t, int> next_{0, 0};
  std::optional<std::pair<int64_t, int>> running_;
  absl::Status failed_;
  bool stopping_ = false;
  absl::Duration busy_ = absl::ZeroDuration();
  absl::Duration reorder_wait_ = absl::ZeroDuration();
  absl::Duration codec_ = absl::ZeroDuration();
  TraceRecorder* trace_ = nullptr;
  std::thread thread_;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_COLLECTIVE_ENGINE_H_
