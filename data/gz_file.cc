#include "data/gz_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace nereid {
namespace data {
namespace {

gzFile AsGz(void* handle) { return static_cast<gzFile>(handle); }

// Largest single gzread: its length is an unsigned int and it returns an int.
constexpr int64_t kMaxChunk = int64_t{1} << 24;

}  // namespace

absl::StatusOr<std::unique_ptr<GzFile>> GzFile::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
    }
    return absl::InternalError(absl::StrCat(
        path, ": cannot open", err != 0 ? absl::StrCat(": ", std::strerror(err)) : ""));
  }
  gzbuffer(f, 1 << 17);
  return std::unique_ptr<GzFile>(new GzFile(path, f));
}

GzFile::~GzFile() { gzclose_r(AsGz(handle_)); }

absl::Status GzFile::ErrorStatus(const char* during) const {
  int errnum = Z_OK;
  const char* raw = gzerror(AsGz(handle_), &errnum);
  if (errnum == Z_ERRNO) {
    return absl::DataLossError(
        absl::StrCat(path_, ": read error while ", during, ": ", std::strerror(errno)));
  }
  // zlib prefixes its message with the path; drop that, the status names it.
  absl::string_view msg = raw != nullptr ? raw : "unknown zlib error";
  absl::ConsumePrefix(&msg, absl::StrCat(path_, ": "));
  if (errnum == Z_BUF_ERROR) {
    return absl::DataLossError(
        absl::StrCat(path_, ": truncated gzip stream (", msg, ") while ", during));
  }
  return absl::DataLossError(
      absl::StrCat(path_, ": corrupt gzip stream (", msg, ") while ", during));
}

absl::StatusOr<int64_t> GzFile::Read(void* buf, int64_t n) {
  char* out = static_cast<char*>(buf);
  int64_t total = 0;
  while (total < n) {
    const int64_t want = std::min(n - total, kMaxChunk);
    const int got = gzread(AsGz(handle_), out + total, static_cast<unsigned>(want));
    int errnum = Z_OK;
    gzerror(AsGz(handle_), &errnum);
    if (got < 0 || errnum != Z_OK) return ErrorStatus("reading");
    total += got;
    if (got < want) break;  // end of data
  }
  return total;
}

absl::Status GzFile::ReadExactly(void* buf, int64_t n, const char* what) {
  absl::StatusOr<int64_t> got = Read(buf, n);
  if (!got.ok()) return got.status();
  if (*got != n) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": truncated: the file ends after ", *got,
                                              " of the ", n, " bytes of ", what));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GzFile::AtEnd() {
  const int c = gzgetc(AsGz(handle_));
  int errnum = Z_OK;
  gzerror(AsGz(handle_), &errnum);
  if (errnum != Z_OK) return ErrorStatus("checking for trailing data");
  if (c < 0) return true;
  if (gzungetc(c, AsGz(handle_)) < 0) return ErrorStatus("checking for trailing data");
  return false;
}

absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path, int64_t max_bytes) {
  absl::StatusOr<std::unique_ptr<GzFile>> file = GzFile::Open(path);
  if (!file.ok()) return file.status();
  std::vector<uint8_t> data;
  constexpr int64_t kChunk = int64_t{1} << 20;
  while (true) {
    const int64_t have = static_cast<int64_t>(data.size());
    // Read one byte past the cap so an oversized file is detected, never stored.
    const int64_t want = std::min(kChunk, max_bytes + 1 - have);
    data.resize(static_cast<size_t>(have + want));
    absl::StatusOr<int64_t> got = (*file)->Read(data.data() + have, want);
    if (!got.ok()) return got.status();
    data.resize(static_cast<size_t>(have + *got));
    if (static_cast<int64_t>(data.size()) > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          path, ": holds more than ", max_bytes, " bytes (decompressed); refusing to load it"));
    }
    if (*got < want) break;
  }
  data.shrink_to_fit();
  return data;
}

}  // namespace data
}  // namespace nereid
