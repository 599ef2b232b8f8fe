#ifndef NEREID_COMM_SHM_PROGRESS_H_
#define NEREID_COMM_SHM_PROGRESS_H_

// One thread that drives every point-to-point transfer a shm communicator
// was handed asynchronously (Communicator::async_point_to_point): it makes a
// pass over each pending transfer in turn and sleeps on the rank's any-event
// bell only when none moved. A parameter server keeps dozens of transfers
// pending at once (every chunk's push and pull); a thread parked on each
// cost more in wake-ups and context switches than the copies themselves.
// Completions run on this thread, in the order the transfers finish.

#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "comm/shm_transport.h"

namespace nereid {

class ShmProgressEngine {
 public:
  using Done = std::function<void(absl::Status)>;

  explicit ShmProgressEngine(ShmTransport* transport) : transport_(transport) {}
  // Transfers still pending end Cancelled.
  ~ShmProgressEngine();

  // Drives `exchange` to its end; `done` gets its status on the engine's
  // thread (started by the first call).
  void Submit(ShmTransport::PendingExchange exchange, Done done);

 private:
  struct Pending {
    ShmTransport::PendingExchange exchange;
    Done done;
    bool waiting = false;  // its last pass moved nothing
  };
  void Loop();
  // One pass over every pending transfer, finishing those that end; whether
  // any moved.
  bool PassOverAll(std::vector<Pending>& pending);
  // After a round that moved nothing, and at least every 50 ms while others
  // move: fails the waiting transfers that are out of time, aborted or whose
  // peers exited; whether one should pass again at once.
  bool CheckStalled(std::vector<Pending>& pending);
  static void Finish(Pending& p, absl::Status status);

  ShmTransport* transport_;
  std::mutex mu_;
  std::vector<Pending> incoming_;  // guarded by mu_
  bool stopping_ = false;          // guarded by mu_
  std::thread thread_;             // started under mu_ by the first Submit
};

}  // namespace nereid

#endif  // NEREID_COMM_SHM_PROGRESS_H_
