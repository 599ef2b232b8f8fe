#include "core/host_cpu.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace nereid {

absl::StatusOr<double> ParseBusyCpuSeconds(const std::string& proc_stat, const std::string& label,
                                           long ticks_per_second) {
  std::istringstream in(proc_stat);
  std::string line;
  std::getline(in, line);
  std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
  // cpu user nice system idle iowait irq softirq steal ...
  if (fields.size() < 8 || fields[0] != "cpu" || ticks_per_second <= 0) {
    return absl::DataLossError(absl::StrCat(label, ": the first line is not the 'cpu' totals: '", line, "'"));
  }
  double busy = 0;
  for (int i : {1, 2, 3, 6, 7}) {
    uint64_t ticks;
    if (!absl::SimpleAtoi(fields[i], &ticks)) {
      return absl::DataLossError(absl::StrCat(label, ": field ", i, " of the 'cpu' line is not a count: '",
                                              fields[i], "'"));
    }
    busy += static_cast<double>(ticks);
  }
  return busy / static_cast<double>(ticks_per_second);
}

absl::StatusOr<double> HostBusyCpuSeconds() {
  std::ifstream file("/proc/stat");
  if (!file) return absl::UnavailableError("/proc/stat: cannot open (not Linux?)");
  std::string first;
  std::getline(file, first);
  return ParseBusyCpuSeconds(first, "/proc/stat", sysconf(_SC_CLK_TCK));
}

int HostCores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string HostBootId() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (file) std::getline(file, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace nereid
