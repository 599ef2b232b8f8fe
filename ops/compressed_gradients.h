#ifndef NEREID_OPS_COMPRESSED_GRADIENTS_H_
#define NEREID_OPS_COMPRESSED_GRADIENTS_H_

// A CompressedAllReduce node's gradients and their codecs, as its CPU and
// GPU kernels both read them: one codec per gradient (compress/codec.h),
// made and checked against the gradient's shape, with the codec's seed and
// layer and the number of state tensors it keeps. Inputs: the gradients,
// then each gradient's state in turn; outputs the same.

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compress/codec.h"
#include "ops/kernel.h"

namespace nereid {

struct CompressedGradient {
  std::unique_ptr<GradientCodec> codec;
  CodecStep step;  // layer and seed; the step is set per run
  int states = 0;
  int64_t elements = 0;  // the gradient's values
};

struct CompressedGradients {
  std::string method;
  int bucket = 0;  // the node's turn among the collectives
  std::vector<CompressedGradient> gradients;

  // The node's codecs; an error names the node, the method and the gradient.
  static absl::StatusOr<CompressedGradients> Make(const Node& node, const AttrMap& attrs);
};

}  // namespace nereid

#endif  // NEREID_OPS_COMPRESSED_GRADIENTS_H_
