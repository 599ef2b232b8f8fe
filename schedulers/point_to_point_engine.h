#ifndef NEREID_SCHEDULERS_POINT_TO_POINT_ENGINE_H_
#define NEREID_SCHEDULERS_POINT_TO_POINT_ENGINE_H_

// Runs a worker's Send and Recv transfers (ops/collective_queue.h,
// PointToPointChannel): each on a thread of its own, at once, so no transfer
// waits behind another (a rank may receive before it sends, or the reverse,
// without deadlock). A transfer is bounded by the communicator's timeout;
// the destructor waits for the transfers still running.

#include <condition_variable>
#include <mutex>

#include "comm/abort_signal.h"
#include "comm/communicator.h"
#include "ops/collective_queue.h"

namespace nereid {

class PointToPointEngine : public PointToPointChannel {
 public:
  PointToPointEngine(Communicator* communicator, absl::Duration timeout)
      : communicator_(communicator), timeout_(timeout) {}
  ~PointToPointEngine() override;

  void Submit(Work work, Done done) override;
  absl::Duration timeout() const override { return timeout_; }
  AbortSignal* abort_signal() override { return &abort_; }

  // Transfers running now (the launcher's "waiting for peers").
  int running() const;

 private:
  Communicator* communicator_;
  absl::Duration timeout_;
  AbortSignal abort_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  int running_ = 0;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_POINT_TO_POINT_ENGINE_H_
