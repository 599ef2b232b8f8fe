#include "runtime/step_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<StepLog>> StepLog::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--log-jsonl ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<StepLog>(new StepLog(file, path));
}

StepLog::~StepLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void StepLog::Write(const std::string& event, const Json& fields) {
  if (file_ == nullptr) return;
  Json line;
  line["event"] = event;
  line["time"] = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  for (const auto& [key, value] : fields.items()) line[key] = value;
  const std::string text = JsonLine(line);
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) failed_ = true;
}

absl::Status StepLog::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (failed_ || !closed) return absl::DataLossError(absl::StrCat("--log-jsonl ", path_, ": a write failed"));
  return absl::OkStatus();
}

}  // namespace nereid
