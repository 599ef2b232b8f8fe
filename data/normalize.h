#ifndef NEREID_DATA_NORMALIZE_H_
#define NEREID_DATA_NORMALIZE_H_

// Per-channel standardisation of a dataset in place:
//   x[n][c][h][w] = (x[n][c][h][w] - mean[c]) / stddev[c].
// `mean` and `stddev` must each hold one value per channel, and every stddev
// must be finite and positive; otherwise InvalidArgument and the dataset is
// left unchanged.

#include <vector>

#include "absl/status/status.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

absl::Status NormalizePerChannel(Dataset* dataset, const std::vector<float>& mean,
                                 const std::vector<float>& stddev);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_NORMALIZE_H_
