#ifndef NEREID_DATA_TEXT_DATASET_H_
#define NEREID_DATA_TEXT_DATASET_H_

// Plain text as a character-level language-modelling dataset: the bytes of a
// file (or of every regular file in a directory, in name order, skipping
// symbolic links and the `.dat` indexes of fortune files) cut into
// contiguous windows of T bytes. Example i is the window
// text[i*T, (i+1)*T) as ids (the byte values, 0..255: 256 classes) and its
// labels are the next bytes, text[i*T + 1, (i+1)*T + 1): one label per
// position (Dataset::labels_per_example = T). The first 90% of the text is
// the train split and the last 10% the test split, so no window of the test
// text was seen in training. Windows are examples, so the batch loader's
// seeded shuffle and sharding across ranks apply as to images.
//
// T comes from the model: its images Input is [-1, T].

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

// The text read at most (the fortune files hold 2.6 MB).
inline constexpr int64_t kMaxTextBytes = int64_t{256} << 20;
// Share of the text, from its start, that is the train split.
inline constexpr double kTextTrainShare = 0.9;

// `split_name` is "train" or "test".
absl::StatusOr<Dataset> LoadTextDataset(const std::string& path, const std::string& split_name,
                                        int64_t sequence_length);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_TEXT_DATASET_H_
