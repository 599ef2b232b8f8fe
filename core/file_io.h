#ifndef NEREID_CORE_FILE_IO_H_
#define NEREID_CORE_FILE_IO_H_

// Writing a file so that a reader sees the old contents or the new, never a
// torn mix: a temporary file beside `path`, fsync, rename. Graphs, plans,
// checkpoints, traces and metrics are all written this way. Reading a file
// whole is here too.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nereid {

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The file's contents, bytes as they are. NotFound "cannot open PATH" when it
// cannot be opened, DataLoss "error reading PATH" when a read fails.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace nereid

#endif  // NEREID_CORE_FILE_IO_H_
