#ifndef NEREID_DATA_DATASET_H_
#define NEREID_DATA_DATASET_H_

// An in-memory image-classification dataset: `num_examples` images of
// channels x height x width floats, stored NCHW in one flat vector and already
// normalised (each loader documents to what), plus one int32 label per image
// in [0, num_classes).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace nereid {
namespace data {

struct Dataset {
  std::string name;
  int64_t num_examples = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int num_classes = 0;
  std::vector<float> images;    // num_examples * C * H * W, NCHW
  std::vector<int32_t> labels;  // num_examples
  // The standardisation applied after loading ("(x - 0.286) / 0.353",
  // "none"): data/normalize.h.
  std::string normalization = "none";

  // C * H * W: floats per example.
  int64_t image_size() const { return channels * height * width; }

  // Checks that the shape fields are positive, the vectors have the sizes they
  // imply, and every label lies in [0, num_classes). The error names `name`.
  absl::Status Validate() const;

  // Keeps only the first `n` examples (no-op when n <= 0 or n >= num_examples).
  void Truncate(int64_t n);
};

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_DATASET_H_
