#include "comm/gloo_status.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"

namespace nereid {
namespace {

bool SaysTimeout(absl::string_view message) {
  const std::string lower = absl::AsciiStrToLower(message);
  return absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout");
}

absl::Status Make(absl::StatusCode fallback, absl::string_view where, absl::string_view kind,
                  absl::string_view message) {
  const absl::StatusCode code = SaysTimeout(message) ? absl::StatusCode::kDeadlineExceeded : fallback;
  return absl::Status(code, absl::StrCat(where, ": ", kind, ": ", message));
}

}  // namespace

absl::Status StatusFromGlooException(std::exception_ptr error, absl::string_view where) {
  if (error == nullptr) return absl::OkStatus();
  try {
    std::rethrow_exception(error);
  } catch (const gloo::IoException& e) {
    return Make(absl::StatusCode::kUnavailable, where, "gloo I/O error", e.what());
  } catch (const gloo::Exception& e) {
    return Make(absl::StatusCode::kInternal, where, "gloo error", e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return Make(absl::StatusCode::kInternal, where, "gloo check failed", e.what());
  } catch (const std::exception& e) {
    return Make(absl::StatusCode::kInternal, where, "exception", e.what());
  } catch (...) {
    return absl::UnknownError(absl::StrCat(where, ": unknown exception"));
  }
}

}  // namespace nereid
