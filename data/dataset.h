#ifndef NEREID_DATA_DATASET_H_
#define NEREID_DATA_DATASET_H_

// An in-memory image-classification dataset: `num_examples` images of
// channels x height x width floats, stored NCHW in one flat vector and already
// normalised (each loader documents to what), plus int32 labels in
// [0, num_classes): one per image, or one per position of a sequence
// (`labels_per_example`, a tagger's or a language model's targets), where
// kIgnoredLabel marks a position the loss and the accuracy skip (padding).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace nereid {
namespace data {

// PyTorch's default ignore_index; a loss given ignore_index -100 skips it.
inline constexpr int32_t kIgnoredLabel = -100;

struct Dataset {
  std::string name;
  int64_t num_examples = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int num_classes = 0;
  std::vector<float> images;    // num_examples * C * H * W, NCHW
  std::vector<int32_t> labels;  // num_examples * labels_per_example
  int64_t labels_per_example = 1;
  // The standardisation applied after loading ("(x - 0.286) / 0.353",
  // "none"): data/normalize.h.
  std::string normalization = "none";

  // C * H * W: floats per example.
  int64_t image_size() const { return channels * height * width; }

  // Checks that the shape fields are positive, the vectors have the sizes they
  // imply, and every label lies in [0, num_classes) or is kIgnoredLabel. The
  // error names `name`.
  absl::Status Validate() const;

  // Keeps only the first `n` examples (no-op when n <= 0 or n >= num_examples).
  void Truncate(int64_t n);
};

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_DATASET_H_
