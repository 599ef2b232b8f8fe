#include "runtime/launcher/split_threads.h"

#include <algorithm>

namespace nereid {
namespace launcher {

std::vector<int> SplitThreads(int total_threads, int workers) {
  if (workers < 1) return {};
  const int total = std::max(total_threads, workers);
  std::vector<int> counts(static_cast<size_t>(workers), total / workers);
  for (int r = 0; r < total % workers; ++r) ++counts[static_cast<size_t>(r)];
  return counts;
}

}  // namespace launcher
}  // namespace nereid
