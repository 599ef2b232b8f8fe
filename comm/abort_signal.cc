#include "comm/abort_signal.h"

#include <utility>

namespace nereid {

int64_t AbortSignal::Register(std::function<void()> action) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fired_) {
    action();
    return -1;
  }
  const int64_t id = next_id_++;
  actions_.emplace(id, std::move(action));
  return id;
}

// Actions run under mu_, so Unregister waits for one that is running.
void AbortSignal::Unregister(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  actions_.erase(id);
}

void AbortSignal::Fire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fired_) return;
  fired_ = true;
  for (auto& [id, action] : actions_) action();
  actions_.clear();
}

bool AbortSignal::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

}  // namespace nereid
