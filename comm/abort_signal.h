#ifndef NEREID_COMM_ABORT_SIGNAL_H_
#define NEREID_COMM_ABORT_SIGNAL_H_

// A one-way switch that ends waits in progress. A transfer registers how to
// end its wait (Gloo: abortWaitRecv on its live buffer) for as long as it
// waits; Fire runs every registered action once, and an action registered
// after Fire runs at once. So a rank that has failed stops waiting for peers
// now instead of at the timeout.

#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/container/flat_hash_map.h"

namespace nereid {

class AbortSignal {
 public:
  // The id unregisters. Runs `action` before returning when already fired.
  int64_t Register(std::function<void()> action);
  // After Unregister returns, the action is not running and will not run, so
  // what it touches may be destroyed.
  void Unregister(int64_t id);
  void Fire();
  bool fired() const;

 private:
  mutable std::mutex mu_;
  bool fired_ = false;
  int64_t next_id_ = 0;
  absl::flat_hash_map<int64_t, std::function<void()>> actions_;
};

// Registers for the scope's lifetime; a null signal registers nothing.
class AbortRegistration {
 public:
  AbortRegistration(AbortSignal* signal, std::function<void()> action)
      : signal_(signal), id_(signal != nullptr ? signal->Register(std::move(action)) : -1) {}
  ~AbortRegistration() {
    if (signal_ != nullptr) signal_->Unregister(id_);
  }
  AbortRegistration(const AbortRegistration&) = delete;
  AbortRegistration& operator=(const AbortRegistration&) = delete;

 private:
  AbortSignal* signal_;
  int64_t id_;
};

}  // namespace nereid

#endif  // NEREID_COMM_ABORT_SIGNAL_H_
