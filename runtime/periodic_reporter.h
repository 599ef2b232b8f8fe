#ifndef NEREID_RUNTIME_PERIODIC_REPORTER_H_
#define NEREID_RUNTIME_PERIODIC_REPORTER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace nereid {

// Calls `tick` every `period` on a thread of its own until destroyed.
class PeriodicReporter {
 public:
  PeriodicReporter(absl::Duration period, std::function<void()> tick)
      : thread_([this, period, tick = std::move(tick)] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!stop_) {
            if (cv_.wait_for(lock, absl::ToChronoNanoseconds(period), [this] { return stop_; })) break;
            lock.unlock();
            tick();
            lock.lock();
          }
        }) {}
  ~PeriodicReporter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_PERIODIC_REPORTER_H_
