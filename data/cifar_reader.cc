#include "data/cifar_reader.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/gz_file.h"

namespace nereid {
namespace data {

absl::StatusOr<Dataset> LoadCifar10(const std::vector<std::string>& batch_paths) {
  if (batch_paths.empty()) {
    return absl::InvalidArgumentError("LoadCifar10: no batch files given");
  }
  Dataset ds;
  ds.name = "cifar10";
  ds.channels = 3;
  ds.height = 32;
  ds.width = 32;
  ds.num_classes = 10;

  float scaled[256];
  for (int v = 0; v < 256; ++v) scaled[v] = static_cast<float>(v) / 255.0f;

  // Read and check every file first, then convert into one allocation.
  std::vector<std::vector<uint8_t>> files;
  int64_t total_bytes = 0;
  for (const std::string& path : batch_paths) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path, kMaxDataFileBytes));
    const int64_t size = static_cast<int64_t>(bytes.size());
    if (size == 0 || size % kCifarRecordBytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": size ", size, " bytes is not a positive multiple of ", kCifarRecordBytes,
          " (1 label byte + ", kCifarImageBytes, " pixel bytes per CIFAR-10 record)"));
    }
    total_bytes += size;
    if (total_bytes > kMaxDataFileBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(path, ": the CIFAR-10 files up to this one ",
                                                       "hold more than ", kMaxDataFileBytes,
                                                       " bytes; refusing to load them"));
    }
    for (int64_t r = 0; r < size / kCifarRecordBytes; ++r) {
      const uint8_t label = bytes[static_cast<size_t>(r * kCifarRecordBytes)];
      if (label >= 10) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": label ", int{label}, " of record ",
                                                       r, " is out of range [0, 10)"));
      }
    }
    files.push_back(std::move(bytes));
  }

  ds.num_examples = total_bytes / kCifarRecordBytes;
  ds.labels.reserve(static_cast<size_t>(ds.num_examples));
  ds.images.resize(static_cast<size_t>(ds.num_examples * kCifarImageBytes));
  float* out = ds.images.data();
  for (std::vector<uint8_t>& bytes : files) {
    const int64_t records = static_cast<int64_t>(bytes.size()) / kCifarRecordBytes;
    for (int64_t r = 0; r < records; ++r) {
      const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
      ds.labels.push_back(rec[0]);
      for (int64_t i = 1; i <= kCifarImageBytes; ++i) *out++ = scaled[rec[i]];
    }
    std::vector<uint8_t>().swap(bytes);  // release as we go
  }
  return ds;
}

}  // namespace data
}  // namespace nereid
