#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace nereid {

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat(tmp, ": write failed: ", std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(tmp, ": fsync/close failed: ", std::strerror(err)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return contents;
}

}  // namespace nereid
