#ifndef NEREID_DATA_NORMALIZE_H_
#define NEREID_DATA_NORMALIZE_H_

// Per-channel standardisation of a dataset in place:
//   x[n][c][h][w] = (x[n][c][h][w] - mean[c]) / stddev[c].
// `mean` and `stddev` must each hold one value per channel, and every stddev
// must be finite and positive; otherwise InvalidArgument and the dataset is
// left unchanged.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

absl::Status NormalizePerChannel(Dataset* dataset, const std::vector<float>& mean,
                                 const std::vector<float>& stddev);

// What `--normalize` asks for, applied to the train and test splits alike:
//   "default"        the dataset's own standardisation (datasets.h says
//                    which: Fashion-MNIST's and CIFAR-10's mean and stddev;
//                    none for synthetic, npy: and csv: data)
//   "none"           the values as loaded (IDX and CIFAR bytes scaled to
//                    [0, 1], user arrays as stored)
//   "M/S"            (x - M) / S on every channel
//   "M1,M2,.../S1,S2,..."  one mean and one stddev per channel
struct NormalizationSpec {
  enum class Kind { kDefault, kNone, kPerChannel };
  Kind kind = Kind::kDefault;
  std::vector<float> mean, stddev;  // kPerChannel: one value, or one per channel
};

// InvalidArgument naming the text for anything else, a count of means that
// differs from the count of stddevs, a stddev <= 0 or a value not finite.
absl::StatusOr<NormalizationSpec> ParseNormalization(absl::string_view text);

// Applies `spec` to `dataset`, whose own standardisation is `default_mean` /
// `default_stddev` (empty: none), and records what was done in
// dataset->normalization ("(x - 0.286) / 0.353", "none").
absl::Status ApplyNormalization(Dataset* dataset, const NormalizationSpec& spec,
                                const std::vector<float>& default_mean, const std::vector<float>& default_stddev);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_NORMALIZE_H_
