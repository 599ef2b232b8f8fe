#ifndef NEREID_DATA_NPZ_DATASET_H_
#define NEREID_DATA_NPZ_DATASET_H_

// A user's own arrays as a dataset: DIR/train.npz and DIR/test.npz, each
// holding `images` ([N, D], [N, H, W] or [N, C, H, W]; float32, float64,
// uint8, int32 or int64) and `labels` ([N]; int32 or int64, from 0). Written
// in NumPy with
//
//   numpy.savez("DIR/train.npz", images=x_train, labels=y_train)
//
// The images are fed as they are: normalise them before saving (nothing is
// applied silently). Integer arrays (token ids, within +-2^24, which float32
// holds exactly) feed a model's int32 / int64 input as integers. The class count is the largest
// label plus one.

#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

// `split_name` is "train" or "test": reads DIR/<split_name>.npz.
absl::StatusOr<Dataset> LoadNpzDataset(const std::string& dir, const std::string& split_name);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_NPZ_DATASET_H_
