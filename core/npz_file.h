#ifndef NEREID_CORE_NPZ_FILE_H_
#define NEREID_CORE_NPZ_FILE_H_

// NumPy's .npz: a zip archive of NAME.npy members (libzip), what
// numpy.load returns as a dict of arrays.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace nereid {

// Writes every array as "<name>.npy", uncompressed (as numpy.savez does),
// to a temporary file renamed over `path` once complete.
absl::Status WriteNpz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays);

// Every member, in archive order, named without ".npy".
absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadNpz(const std::string& path);

}  // namespace nereid

#endif  // NEREID_CORE_NPZ_FILE_H_
