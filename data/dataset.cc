#include "data/dataset.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace data {

absl::Status Dataset::Validate() const {
  const std::string who = name.empty() ? "dataset" : absl::StrCat("dataset '", name, "'");
  if (num_examples < 0 || channels <= 0 || height <= 0 || width <= 0 || num_classes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": bad shape: num_examples=", num_examples,
                                                   " channels=", channels, " height=", height,
                                                   " width=", width, " num_classes=", num_classes));
  }
  // Divide rather than multiply so an absurd shape cannot overflow.
  if (height > INT64_MAX / width || channels > INT64_MAX / (height * width)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": image shape ", channels, "x", height, "x", width, " overflows"));
  }
  const int64_t per_example = image_size();
  const int64_t num_floats = static_cast<int64_t>(images.size());
  if (num_floats % per_example != 0 || num_floats / per_example != num_examples) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": holds ", images.size(),
                                                   " floats of pixels, expected ", num_examples,
                                                   " x ", channels, "x", height, "x", width));
  }
  if (labels_per_example < 1 || num_examples > INT64_MAX / labels_per_example ||
      static_cast<int64_t>(labels.size()) != num_examples * labels_per_example) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": holds ", labels.size(), " labels for ", num_examples,
                                                   " examples of ", labels_per_example, " each"));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if ((labels[i] < 0 || labels[i] >= num_classes) && labels[i] != kIgnoredLabel) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": label ", labels[i], " of example ", static_cast<int64_t>(i) / labels_per_example,
                       labels_per_example > 1 ? absl::StrCat(" position ", static_cast<int64_t>(i) % labels_per_example)
                                              : "",
                       " is outside [0, ", num_classes, ") and is not ", kIgnoredLabel, " (ignored)"));
    }
  }
  return absl::OkStatus();
}

void Dataset::Truncate(int64_t n) {
  if (n <= 0 || n >= num_examples) return;
  num_examples = n;
  images.resize(static_cast<size_t>(n * image_size()));
  images.shrink_to_fit();
  labels.resize(static_cast<size_t>(n * labels_per_example));
  labels.shrink_to_fit();
}

}  // namespace data
}  // namespace nereid
