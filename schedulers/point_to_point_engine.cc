#include "schedulers/point_to_point_engine.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace nereid {

PointToPointEngine::~PointToPointEngine() {
  std::vector<std::thread> threads;
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return running_ == 0; });
    stopping_ = true;
    threads.swap(threads_);
  }
  work_ready_.notify_all();
  for (std::thread& t : threads) t.join();
}

void PointToPointEngine::Submit(Work work, Done done) {
  std::lock_guard<std::mutex> lock(mu_);
  ++running_;
  queue_.emplace_back(std::move(work), std::move(done));
  // Every queued transfer needs a thread now: one idle takes it, or a new one.
  // A new thread counts as idle from here, not from when it first runs: a
  // thread not yet scheduled is still on its way to the queue.
  if (waiting_ >= static_cast<int>(queue_.size())) {
    work_ready_.notify_one();
  } else {
    ++waiting_;
    threads_.emplace_back([this] { Serve(); });
  }
}

AsyncPointToPoint* PointToPointEngine::AsyncFor(int peer) const {
  return peer == communicator_->rank() ? nullptr : communicator_->async_point_to_point();
}

PointToPointChannel::Done PointToPointEngine::Counted(Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++running_;
  }
  return [this, done = std::move(done)](absl::Status status) mutable {
    Done finish = std::move(done);
    finish(std::move(status));
    finish = nullptr;  // what the transfer captured goes before it counts as done
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) idle_.notify_all();
  };
}

void PointToPointEngine::SubmitSend(absl::Span<const float> data, int peer, const CollectiveOptions& options,
                                    Done done) {
  AsyncPointToPoint* async = AsyncFor(peer);
  if (async == nullptr) return PointToPointChannel::SubmitSend(data, peer, options, std::move(done));
  async->StartSend(data, peer, options, Counted(std::move(done)));
}

void PointToPointEngine::SubmitRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, Done done) {
  AsyncPointToPoint* async = AsyncFor(peer);
  if (async == nullptr) return PointToPointChannel::SubmitRecv(data, peer, options, std::move(done));
  async->StartRecv(data, peer, options, Counted(std::move(done)));
}

void PointToPointEngine::Serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {  // waiting_ counts this thread here (Submit counted it at start)
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --waiting_;
    if (queue_.empty()) return;  // stopping
    std::pair<Work, Done> item = std::move(queue_.front());
    queue_.pop_front();
    if (!queue_.empty()) work_ready_.notify_one();  // pass a wake-up on, never lose one
    lock.unlock();
    Run(item.first, item.second);
    item = {};  // what the transfer captured goes before it counts as done
    lock.lock();
    if (--running_ == 0) idle_.notify_all();
    ++waiting_;
  }
}

void PointToPointEngine::Run(Work& work, Done& done) {
  // An exception must not escape a transfer's thread (std::terminate).
  absl::Status status;
  try {
    status = work(*communicator_);
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("point-to-point transfer: ", e.what()));
  }
  done(std::move(status));
}

int PointToPointEngine::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int PointToPointEngine::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

}  // namespace nereid
