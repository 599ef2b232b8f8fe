#ifndef NEREID_DEVICE_TEST_GATE_H_
#define NEREID_DEVICE_TEST_GATE_H_

// For tests: work that holds a stream until the test opens the gate. The
// gate opens itself when destroyed, so a failed assertion never leaves a
// stream blocked (and its destructor waiting forever): declare the gate
// after the streams it holds.

#include <future>

#include "absl/status/status.h"
#include "device/device.h"

namespace nereid {

class TestGate {
 public:
  TestGate() : opened_(promise_.get_future().share()) {}
  ~TestGate() { Open(); }
  TestGate(const TestGate&) = delete;
  TestGate& operator=(const TestGate&) = delete;

  void Open() {
    if (open_) return;
    open_ = true;
    promise_.set_value();
  }

  // Work that returns once the gate is open.
  Stream::Work Hold() const {
    return [opened = opened_] {
      opened.wait();
      return absl::OkStatus();
    };
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> opened_;
  bool open_ = false;
};

}  // namespace nereid

#endif  // NEREID_DEVICE_TEST_GATE_H_
