#ifndef NEREID_RUNTIME_STALL_CHECK_H_
#define NEREID_RUNTIME_STALL_CHECK_H_

// Flags, once, a run whose loss has not gone below its start by a share of
// its steps (--stall-check P): a run training to chance looks like this, and
// would otherwise end with exit 0 and nothing said.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nereid {

class StallCheck {
 public:
  // `percent` <= 0: never flags.
  explicit StallCheck(int64_t percent) : percent_(percent) {}

  // After each step: the warning to show, the first time the mean loss over
  // the last steps is not 1% below the mean over the first, once `percent`
  // of the run's `total_steps` are done; nullopt otherwise.
  std::optional<std::string> Check(const std::vector<float>& losses, int64_t total_steps);

 private:
  int64_t percent_;
  bool checked_ = false;
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_STALL_CHECK_H_
