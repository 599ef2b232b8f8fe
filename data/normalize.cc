#include "data/normalize.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace data {

absl::Status NormalizePerChannel(Dataset* dataset, const std::vector<float>& mean,
                                 const std::vector<float>& stddev) {
  if (dataset == nullptr) return absl::InvalidArgumentError("NormalizePerChannel: null dataset");
  Dataset& ds = *dataset;
  if (static_cast<int64_t>(mean.size()) != ds.channels ||
      static_cast<int64_t>(stddev.size()) != ds.channels) {
    return absl::InvalidArgumentError(absl::StrCat("NormalizePerChannel on '", ds.name, "': got ",
                                                   mean.size(), " means and ", stddev.size(),
                                                   " stddevs for ", ds.channels, " channels"));
  }
  for (size_t c = 0; c < mean.size(); ++c) {
    if (!std::isfinite(mean[c]) || !std::isfinite(stddev[c]) || !(stddev[c] > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("NormalizePerChannel on '", ds.name, "': channel ", c, " has mean ", mean[c],
                       " and stddev ", stddev[c], "; need finite values and stddev > 0"));
    }
  }
  if (absl::Status valid = ds.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("NormalizePerChannel: ", valid.message()));
  }
  const int64_t plane = ds.height * ds.width;
  for (int64_t n = 0; n < ds.num_examples; ++n) {
    for (int64_t c = 0; c < ds.channels; ++c) {
      float* p = ds.images.data() + (n * ds.channels + c) * plane;
      const float m = mean[c];
      const float s = stddev[c];
      for (int64_t i = 0; i < plane; ++i) p[i] = (p[i] - m) / s;
    }
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace nereid
