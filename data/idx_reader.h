#ifndef NEREID_DATA_IDX_READER_H_
#define NEREID_DATA_IDX_READER_H_

// Reads an image-classification dataset stored as a pair of IDX files (the
// MNIST / Fashion-MNIST format), gzip-compressed or plain:
//   images: magic 0x00000803 (uint8, 3 dims), big-endian uint32 count, rows,
//           cols, then count*rows*cols pixel bytes;
//   labels: magic 0x00000801 (uint8, 1 dim), big-endian uint32 count, then
//           count label bytes.
// The result has 1 channel; pixels become float x/255 in [0, 1].
//
// Every header field is checked before anything is allocated (dimensions
// positive, at most 65536 rows/cols, at most kMaxDataFileBytes of pixels), and
// buffers grow only as decompressed data actually arrives, so a corrupt header
// cannot make a small file allocate much. The data must be exactly as long as
// the header says (no truncation, no trailing bytes), both files must agree on
// the count, and every label must be below `num_classes`. Errors name the
// offending file. With `max_examples` > 0 only the first that many examples
// are read (and checked): a run on a few thousand examples does not pay to
// decompress and convert all of them.

#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/gz_file.h"

namespace nereid {
namespace data {

inline constexpr uint32_t kIdxUint8ImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxUint8LabelsMagic = 0x00000801;

struct IdxLimits {
  int64_t max_examples = 0;                     // 0: every example in the file
  int64_t max_pixel_bytes = kMaxDataFileBytes;  // the cap on what a header may declare
};

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                                int num_classes, const IdxLimits& limits = {});

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_IDX_READER_H_
