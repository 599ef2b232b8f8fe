#ifndef NEREID_SCHEDULERS_POINT_TO_POINT_ENGINE_H_
#define NEREID_SCHEDULERS_POINT_TO_POINT_ENGINE_H_

// Runs a worker's Send and Recv transfers (ops/collective_queue.h,
// PointToPointChannel): each on a thread of its own, at once, so no transfer
// waits behind another (a rank may receive before it sends, or the reverse,
// without deadlock). Threads are kept and reused: a transfer takes an idle
// one, and a new one starts only when none is idle (starting a thread per
// transfer cost about a millisecond each here). A transfer is bounded by the
// communicator's timeout and ended at once by the abort signal (the executor
// fires it on a failure); the destructor waits for the transfers still
// running, then stops the threads. Where the communicator drives transfers
// on a progress thread of its own (the shm backend), a message of a known
// size goes there instead and holds no thread here.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

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
  // On the communicator's own progress thread where it has one (transfers
  // to other ranks), else as Submit.
  void SubmitSend(absl::Span<const float> data, int peer, const CollectiveOptions& options, Done done) override;
  void SubmitRecv(absl::Span<float> data, int peer, const CollectiveOptions& options, Done done) override;
  absl::Duration timeout() const override { return timeout_; }
  AbortSignal* abort_signal() override { return &abort_; }

  // Transfers running now (the launcher's "waiting for peers").
  int running() const;
  // Threads started so far (idle ones included).
  int threads() const;

 private:
  void Serve();
  // The communicator's progress thread for a transfer with `peer`, or null.
  AsyncPointToPoint* AsyncFor(int peer) const;
  // `done`, counted among the running transfers until it has run.
  Done Counted(Done done);
  void Run(Work& work, Done& done);

  Communicator* communicator_;
  absl::Duration timeout_;
  AbortSignal abort_;
  mutable std::mutex mu_;
  std::condition_variable work_ready_, idle_;
  std::deque<std::pair<Work, Done>> queue_;
  std::vector<std::thread> threads_;
  int running_ = 0;  // submitted and not finished
  int waiting_ = 0;  // threads waiting for work
  bool stopping_ = false;
};

}  // namespace nereid

#endif  // NEREID_SCHEDULERS_POINT_TO_POINT_ENGINE_H_
