#include "runtime/stall_check.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace nereid {

std::optional<std::string> StallCheck::Check(const std::vector<float>& losses, int64_t total_steps) {
  if (percent_ <= 0 || checked_) return std::nullopt;
  const int64_t n = static_cast<int64_t>(losses.size());
  if (n < std::max<int64_t>(2, total_steps * percent_ / 100)) return std::nullopt;
  checked_ = true;
  const int64_t w = std::clamp<int64_t>(n / 10, 1, 20);  // steps averaged at each end
  double first = 0, recent = 0;
  for (int64_t i = 0; i < w; ++i) {
    first += losses[static_cast<size_t>(i)];
    recent += losses[static_cast<size_t>(n - w + i)];
  }
  first /= static_cast<double>(w);
  recent /= static_cast<double>(w);
  if (recent < 0.99 * first) return std::nullopt;
  return absl::StrFormat("the loss has not improved on its start after %lld of %lld steps (%.4f over the first "
                         "%lld, %.4f over the last): check the learning rate, the codec and the data",
                         static_cast<long long>(n), static_cast<long long>(total_steps), first,
                         static_cast<long long>(w), recent);
}

}  // namespace nereid
