#include "schedulers/point_to_point_engine.h"

#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"

namespace nereid {

PointToPointEngine::~PointToPointEngine() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return running_ == 0; });
}

void PointToPointEngine::Submit(Work work, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++running_;
  }
  // Detached: the count, not a join, tells the destructor when all are done.
  std::thread([this, work = std::move(work), done = std::move(done)] {
    // An exception must not escape a detached thread (std::terminate).
    absl::Status status;
    try {
      status = work(*communicator_);
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat("point-to-point transfer: ", e.what()));
    }
    done(std::move(status));
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) idle_.notify_all();
  }).detach();
}

int PointToPointEngine::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

}  // namespace nereid
