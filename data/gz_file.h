#ifndef NEREID_DATA_GZ_FILE_H_
#define NEREID_DATA_GZ_FILE_H_

// Bounded reading of gzip-compressed or plain files through zlib's gzread
// (which passes plain files through unchanged). Every error message starts
// with the file's path. Nothing here allocates more than the caller's cap.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace nereid {
namespace data {

// The most decompressed bytes any data file may hold (2 GiB).
inline constexpr int64_t kMaxDataFileBytes = int64_t{2} << 30;

class GzFile {
 public:
  // NotFound when the path does not exist; FailedPrecondition when it is not a
  // regular file; Internal/PermissionDenied when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<GzFile>> Open(const std::string& path);
  ~GzFile();
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to `n` decompressed bytes into `buf`; returns how many were read,
  // fewer than `n` only at the end of the data. A corrupt or truncated gzip
  // stream is a DataLoss error naming the file.
  absl::StatusOr<int64_t> Read(void* buf, int64_t n);

  // Reads exactly `n` bytes; OutOfRange if the data ends first. `what` names
  // the part being read, for the message ("IDX header").
  absl::Status ReadExactly(void* buf, int64_t n, const char* what);

  // True when no decompressed bytes remain (peeks at one byte, consumes none).
  absl::StatusOr<bool> AtEnd();

  const std::string& path() const { return path_; }

 private:
  GzFile(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}
  absl::Status ErrorStatus(const char* during) const;

  std::string path_;
  void* handle_;  // gzFile
};

// Reads the whole decompressed content of `path`; ResourceExhausted when it
// holds more than `max_bytes`.
absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path,
                                                   int64_t max_bytes = kMaxDataFileBytes);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_GZ_FILE_H_
