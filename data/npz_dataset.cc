#include "data/npz_dataset.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/npz_file.h"
#include "core/status_macros.h"

namespace nereid {
namespace data {
namespace {

const Tensor* Find(const std::vector<std::pair<std::string, Tensor>>& arrays, const std::string& name) {
  for (const auto& [n, t] : arrays) {
    if (n == name) return &t;
  }
  return nullptr;
}

template <typename T>
void CastInto(const Tensor& t, std::vector<float>& out) {
  const T* p = t.data<T>();
  out.assign(p, p + t.num_elements());
}

// Integer features (token ids) travel in the dataset's floats, which hold
// every integer up to 2^24 exactly; a model's integer Input gets them back
// as integers.
template <typename T>
absl::Status IntegersInto(const Tensor& t, std::vector<float>& out, const std::string& path) {
  constexpr int64_t kExact = int64_t{1} << 24;
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (static_cast<int64_t>(p[i]) > kExact || static_cast<int64_t>(p[i]) < -kExact) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": 'images' element ", i, " is ", p[i],
                                                     "; integer features must lie within +-2^24 (16777216)"));
    }
  }
  out.assign(p, p + t.num_elements());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadNpzDataset(const std::string& dir, const std::string& split_name) {
  const std::string path = absl::StrCat(dir, "/", split_name, ".npz");
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> arrays = ReadNpz(path);
  if (!arrays.ok()) {
    return absl::Status(arrays.status().code(),
                        absl::StrCat(arrays.status().message(), " (an npy dataset needs ", split_name,
                                     ".npz: numpy.savez(PATH, images=..., labels=...))"));
  }
  const Tensor* images = Find(*arrays, "images");
  const Tensor* labels = Find(*arrays, "labels");
  if (images == nullptr || labels == nullptr) {
    std::vector<std::string> names;
    for (const auto& [n, t] : *arrays) names.push_back(n);
    return absl::InvalidArgumentError(absl::StrCat(path, ": needs arrays 'images' and 'labels'; it holds ",
                                                   names.empty() ? "none" : absl::StrJoin(names, ", ")));
  }
  const std::vector<int64_t>& d = images->dims();
  if (d.size() < 2 || d.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'images' is ", images->DebugString(),
                                                   "; expected [N, D], [N, H, W] or [N, C, H, W]"));
  }
  if (labels->rank() < 1 || labels->rank() > 2 || labels->dim(0) != d[0] || (labels->rank() == 2 && labels->dim(1) < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'labels' is ", labels->DebugString(), "; expected [",
                                                   d[0], "] (one label per example) or [", d[0],
                                                   ", T] (one per position)"));
  }
  Dataset ds;
  ds.name = absl::StrCat("npy/", split_name);
  ds.num_examples = d[0];
  ds.channels = d.size() == 4 ? d[1] : 1;
  ds.height = d.size() >= 3 ? d[d.size() - 2] : 1;
  ds.width = d.back();
  switch (images->dtype()) {
    case DT_FLOAT: CastInto<float>(*images, ds.images); break;
    case DT_DOUBLE: CastInto<double>(*images, ds.images); break;
    case DT_UINT8: CastInto<uint8_t>(*images, ds.images); break;
    case DT_INT32: RETURN_IF_ERROR(IntegersInto<int32_t>(*images, ds.images, path)); break;
    case DT_INT64: RETURN_IF_ERROR(IntegersInto<int64_t>(*images, ds.images, path)); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(path, ": 'images' is ", images->DebugString(),
                                                     "; expected float32, float64, uint8, int32 or int64"));
  }
  ds.labels_per_example = labels->rank() == 2 ? labels->dim(1) : 1;
  ds.labels.resize(labels->num_elements());
  int32_t max_label = 0;
  for (int64_t i = 0; i < labels->num_elements(); ++i) {
    int64_t v;
    if (labels->dtype() == DT_INT64) {
      v = labels->data<int64_t>()[i];
    } else if (labels->dtype() == DT_INT32) {
      v = labels->data<int32_t>()[i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": 'labels' is ", labels->DebugString(),
                                                     "; expected int32 or int64"));
    }
    if ((v < 0 || v > 65535) && v != kIgnoredLabel) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": label ", i, " is ", v, "; labels are class numbers from 0 (",
                                                     kIgnoredLabel, ": a position to ignore)"));
    }
    ds.labels[i] = static_cast<int32_t>(v);
    max_label = std::max(max_label, ds.labels[i]);
  }
  ds.num_classes = max_label + 1;
  for (int64_t i = 0; i < static_cast<int64_t>(ds.images.size()); ++i) {
    if (!std::isfinite(ds.images[i])) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": 'images' element ", i, " is ", ds.images[i]));
    }
  }
  if (absl::Status valid = ds.Validate(); !valid.ok()) return valid;
  return ds;
}

}  // namespace data
}  // namespace nereid
