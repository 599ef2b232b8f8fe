#ifndef NEREID_CORE_LOGGING_H_
#define NEREID_CORE_LOGGING_H_

// The log: what a run has to say besides its progress display (restarts,
// injected faults, checkpoints written, internal errors before an abort), a
// line each on standard error with a timestamp, the rank and a level, through
// spdlog. The progress display (epoch lines, the bar, warnings about the
// training itself) stays on the progress stream; results go to stdout.
//
//   Log().warn("restart {}/{}: {}", n, max, why);

#include <string>

#include "absl/status/status.h"
#include "spdlog/logger.h"

namespace nereid {

// The process's logger (standard error; level info until configured).
spdlog::logger& Log();

// `level`: trace, debug, info, warn, error or off; empty means
// NEREID_LOG_LEVEL's value, else info. `rank` >= 0 is shown in every line.
absl::Status ConfigureLogging(const std::string& level, int rank);

}  // namespace nereid

#endif  // NEREID_CORE_LOGGING_H_
