#ifndef NEREID_DATA_CSV_DATASET_H_
#define NEREID_DATA_CSV_DATASET_H_

// Tabular data as a dataset: DIR/train.csv and DIR/test.csv, one example per
// row, numbers separated by commas. The column headed `label` holds the class
// (an integer from 0); without a header row, the last column does. Every
// other column is a feature, fed as a float32 [N, features] batch as written
// (normalise before saving). A row with another column count, a value that is
// not a number or a NaN is an error naming the file, row and column; a line
// longer than kMaxCsvLineBytes is refused before it is held whole.

#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

inline constexpr size_t kMaxCsvLineBytes = size_t{1} << 20;

absl::StatusOr<Dataset> LoadCsvDataset(const std::string& dir, const std::string& split_name);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_CSV_DATASET_H_
