#include "schedulers/collective_engine.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace nereid {

CollectiveEngine::CollectiveEngine(Communicator* communicator, int buckets_per_step, absl::Duration timeout)
    : communicator_(communicator),
      buckets_per_step_(buckets_per_step),
      timeout_(timeout),
      thread_([this] { Loop(); }) {}

CollectiveEngine::~CollectiveEngine() {
  Abort(absl::CancelledError("the collective engine was shut down"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CollectiveEngine::Reset(int64_t first_step) {
  std::lock_guard<std::mutex> lock(mu_);
  next_ = {first_step, 0};
}

void CollectiveEngine::Submit(int64_t step, int bucket, Work work, Done done) {
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::pair<int64_t, int> key{step, bucket};
    if (!failed_.ok()) {
      refused = failed_;
    } else if (bucket < 0 || bucket >= buckets_per_step_) {
      refused = absl::InvalidArgumentError(
          absl::StrCat("bucket ", bucket, " is outside [0, ", buckets_per_step_, ") at step ", step));
    } else if (key < next_ || queue_.count(key) > 0) {
      refused = absl::FailedPreconditionError(
          absl::StrCat("bucket ", bucket, " of step ", step, " was submitted twice or after its turn (next is bucket ",
                       next_.second, " of step ", next_.first, ")"));
    } else {
      queue_.emplace(key, Request{std::move(work), std::move(done)});
    }
  }
  if (!refused.ok()) {
    done(refused);
    return;
  }
  changed_.notify_all();
}

void CollectiveEngine::Abort(absl::Status status) {
  std::map<std::pair<int64_t, int>, Request> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.ok()) failed_ = status;
    dropped.swap(queue_);
  }
  changed_.notify_all();
  for (auto& [key, request] : dropped) request.done(status);
}

absl::Duration CollectiveEngine::busy_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

std::optional<std::pair<int64_t, int>> CollectiveEngine::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

void CollectiveEngine::set_trace(TraceRecorder* trace) {
  if (trace != nullptr) trace->NameTrack(kTraceTrack, "collectives");
  std::lock_guard<std::mutex> lock(mu_);
  trace_ = trace;
}

void CollectiveEngine::AddCodecTime(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  codec_ += d;
}

absl::Duration CollectiveEngine::codec_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return codec_;
}

absl::Duration CollectiveEngine::reorder_wait_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reorder_wait_;
}

void CollectiveEngine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  absl::Time waiting_since = absl::InfiniteFuture();
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || queue_.count(next_) > 0 || (!queue_.empty() && waiting_since == absl::InfiniteFuture()); });
    if (stopping_) return;
    auto it = queue_.find(next_);
    if (it == queue_.end()) {
      // Later keys are queued but the next one is not: the fixed order holds
      // them back. Measure how long.
      waiting_since = absl::Now();
      continue;
    }
    absl::Time waited_from = waiting_since;
    if (waiting_since != absl::InfiniteFuture()) {
      reorder_wait_ += absl::Now() - waiting_since;
      waiting_since = absl::InfiniteFuture();
    }
    Request request = std::move(it->second);
    running_ = it->first;
    std::pair<int64_t, int> key = it->first;
    TraceRecorder* trace = trace_;
    queue_.erase(it);
    next_ = next_.second + 1 < buckets_per_step_ ? std::make_pair(next_.first, next_.second + 1)
                                                  : std::make_pair(next_.first + 1, 0);
    absl::Status status = failed_;
    lock.unlock();
    absl::Time start = absl::Now();
    TrafficCounters before = trace != nullptr ? communicator_->traffic() : TrafficCounters{};
    if (status.ok()) status = request.work(*communicator_);
    absl::Time end = absl::Now();
    absl::Duration took = end - start;
    if (trace != nullptr) {
      if (waited_from != absl::InfiniteFuture()) {
        trace->CompleteOnTrack(kTraceTrack, absl::StrCat("reorder wait for bucket ", key.second), "wait",
                               waited_from, start, {{"step", key.first}, {"bucket", key.second}});
      }
      TrafficCounters after = communicator_->traffic();
      trace->CompleteOnTrack(kTraceTrack, absl::StrCat("allreduce bucket ", key.second), "comm", start, end,
                             {{"step", key.first},
                              {"bucket", key.second},
                              {"bytes_sent", after.bytes_sent - before.bytes_sent},
                              {"bytes_received", after.bytes_received - before.bytes_received}});
    }
    if (!status.ok()) Abort(status);
    request.done(status);
    lock.lock();
    running_.reset();
    busy_ += took;
  }
}

}  // namespace nereid
