#ifndef NEREID_DATA_CIFAR_READER_H_
#define NEREID_DATA_CIFAR_READER_H_

// Reads CIFAR-10 in its binary distribution format (cifar-10-binary.tar.gz):
// each file is a sequence of 3073-byte records, one label byte in [0, 10)
// followed by 3072 pixel bytes laid out CHW (1024 red, 1024 green, 1024 blue,
// each row-major 32x32). Files may also be gzip-compressed.
//
// The files are concatenated in the order given. Each file's size must be a
// positive multiple of 3073 bytes and at most kMaxDataFileBytes, as must their
// total; every label must be below 10. Pixels become float x/255 in [0, 1].
// Errors name the offending file.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

inline constexpr int64_t kCifarImageBytes = 3 * 32 * 32;
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;

absl::StatusOr<Dataset> LoadCifar10(const std::vector<std::string>& batch_paths);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_CIFAR_READER_H_
