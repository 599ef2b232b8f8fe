#include "core/logging.h"

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace nereid {
namespace {

constexpr char kLevels[] = "trace, debug, info, warn, error or off";

std::string Pattern(int rank) {
  return rank >= 0 ? absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [rank ", rank, "] [%l] %v") : "[%Y-%m-%d %H:%M:%S.%e] [%l] %v";
}

}  // namespace

spdlog::logger& Log() {
  // Created on first use; never destroyed, so logging from static
  // destructors and detached threads stays safe.
  static spdlog::logger* logger = [] {
    auto* made = new spdlog::logger("nereid", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    made->set_pattern(Pattern(-1));
    made->set_level(spdlog::level::info);
    made->flush_on(spdlog::level::trace);  // every line at once: a process may be killed next
    return made;
  }();
  return *logger;
}

absl::Status ConfigureLogging(const std::string& level, int rank) {
  std::string name = level;
  if (name.empty()) {
    const char* from_env = std::getenv("NEREID_LOG_LEVEL");
    name = from_env != nullptr && *from_env != '\0' ? from_env : "info";
  }
  const spdlog::level::level_enum parsed = spdlog::level::from_str(name);
  // from_str answers off for any name it does not know.
  if (parsed == spdlog::level::off && name != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat(level.empty() ? "NEREID_LOG_LEVEL=" : "--log-level ", name, ": expected ", kLevels));
  }
  Log().set_level(parsed);
  Log().set_pattern(Pattern(rank));
  return absl::OkStatus();
}

}  // namespace nereid
