#include "runtime/batch_feeds.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

template <typename T>
absl::Status ToIntegers(const std::vector<float>& values, Tensor& out) {
  T* dst = out.data<T>();
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (!(std::floor(v) == v)) {
      return absl::InvalidArgumentError(absl::StrCat("the model's images input takes ", DataTypeName(out.dtype()),
                                                     " ids, but element ", i, " of the batch is ", v));
    }
    dst[i] = static_cast<T>(v);
  }
  return absl::OkStatus();
}

}  // namespace

FeedLayout FeedLayoutOf(const Graph& graph) {
  FeedLayout layout;
  for (const Node* n : graph.nodes()) {
    const auto& attr = n->def().attr();
    auto feed = attr.find("feed");
    if (n->op() != "Input" || feed == attr.end() || feed->second.s() != "images") continue;
    const ShapeAndType& out = n->outputs()[0];
    layout.images_dtype = out.dtype;
    // Only the batch may vary; an Input with another unknown dimension is fed
    // the batch's own dims.
    const std::vector<int64_t>& dims = out.shape.dims();
    if (!dims.empty() && std::find(dims.begin() + 1, dims.end(), kUnknownDim) == dims.end()) {
      layout.example_dims.assign(dims.begin() + 1, dims.end());
    }
    break;
  }
  return layout;
}

absl::StatusOr<FeedMap> FeedsOf(const data::Batch& batch, const FeedLayout& layout) {
  std::vector<int64_t> dims = batch.image_dims;
  if (!layout.example_dims.empty()) {
    int64_t want = 1, have = 1;
    for (int64_t d : layout.example_dims) want *= d;
    for (size_t i = 1; i < dims.size(); ++i) have *= dims[i];
    if (want == have) {  // same elements per example: the Input's layout
      dims = {batch.size};
      dims.insert(dims.end(), layout.example_dims.begin(), layout.example_dims.end());
    }
  }
  ASSIGN_OR_RETURN(Tensor images, Tensor::Allocate(layout.images_dtype, dims));
  switch (layout.images_dtype) {
    case DT_INT32: RETURN_IF_ERROR(ToIntegers<int32_t>(batch.images, images)); break;
    case DT_INT64: RETURN_IF_ERROR(ToIntegers<int64_t>(batch.images, images)); break;
    case DT_FLOAT: std::memcpy(images.raw(), batch.images.data(), images.num_bytes()); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("the model's images input is ", DataTypeName(layout.images_dtype),
                                                     "; it can be fed float32, int32 or int64"));
  }
  std::vector<int64_t> label_dims = {batch.size};
  if (batch.labels_per_example > 1) label_dims.push_back(batch.labels_per_example);
  ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate(DT_INT32, label_dims));
  std::memcpy(labels.raw(), batch.labels.data(), labels.num_bytes());
  FeedMap feeds;
  feeds["images"] = std::move(images);
  feeds["labels"] = std::move(labels);
  return feeds;
}

}  // namespace nereid
