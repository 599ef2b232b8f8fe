#ifndef NEREID_CORE_STATUS_MACROS_H_
#define NEREID_CORE_STATUS_MACROS_H_

// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Abseil 20220623 (Debian 12) predates
// absl/status/status_macros.h, so Nereid carries its own.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define NEREID_CONCAT_INNER(a, b) a##b
#define NEREID_CONCAT(a, b) NEREID_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status nereid_status_ = (expr);          \
    if (!nereid_status_.ok()) return nereid_status_; \
  } while (false)

#define ASSIGN_OR_RETURN(lhs, expr) \
  NEREID_ASSIGN_OR_RETURN_IMPL(NEREID_CONCAT(nereid_statusor_, __LINE__), lhs, expr)

#define NEREID_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()

#endif  // NEREID_CORE_STATUS_MACROS_H_
