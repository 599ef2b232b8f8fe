#ifndef NEREID_RUNTIME_LAUNCHER_INTERRUPT_HANDLER_H_
#define NEREID_RUNTIME_LAUNCHER_INTERRUPT_HANDLER_H_

// InterruptHandler turns SIGINT and SIGTERM into a byte on a pipe (the
// self-pipe trick), so a poll() loop wakes up when the user presses Ctrl-C.
// While an InterruptHandler lives, each of those signals writes its number
// as one byte to `wake_fd` (which should be non-blocking: a full pipe drops
// the byte, and a full pipe already wakes the loop). Destroying it puts back
// the handlers that were installed before.
//
// Signal dispositions belong to the whole process, so only one
// InterruptHandler may exist at a time; Install() fails while another does.

#include <signal.h>

#include <memory>

#include "absl/status/statusor.h"

namespace nereid {
namespace launcher {

class InterruptHandler {
 public:
  static absl::StatusOr<std::unique_ptr<InterruptHandler>> Install(int wake_fd);

  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;
  ~InterruptHandler();

 private:
  InterruptHandler() = default;
  struct sigaction previous_int_ = {};
  struct sigaction previous_term_ = {};
};

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_INTERRUPT_HANDLER_H_
