#ifndef NEREID_COMM_GLOO_STATUS_H_
#define NEREID_COMM_GLOO_STATUS_H_

// Gloo throws; Nereid returns absl::Status. This file is the one place where
// a Gloo exception becomes a Status:
//
//   message says it timed out ("Timed out waiting", "Read timeout",
//     "Wait timeout", "Application timeout caused pair closure", ...)
//                                        -> DeadlineExceeded
//   gloo::IoException (closed socket, connection refused, ...)
//                                        -> Unavailable
//   gloo::EnforceNotMet, other gloo::Exception, other std::exception
//                                        -> Internal
//   anything else                        -> Unknown
//
// The message is "<where>: <gloo's message>", where `where` names the
// operation, tag, rank and peer (the caller formats it).

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace nereid {

absl::Status StatusFromGlooException(std::exception_ptr error, absl::string_view where);

// Runs `fn`, turning whatever it throws into a Status via
// StatusFromGlooException; OK if it returns normally.
template <typename Fn>
absl::Status CallGloo(absl::string_view where, Fn&& fn) {
  try {
    fn();
  } catch (...) {
    return StatusFromGlooException(std::current_exception(), where);
  }
  return absl::OkStatus();
}

}  // namespace nereid

#endif  // NEREID_COMM_GLOO_STATUS_H_
