#include "ops/compressed_gradients.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace nereid {

absl::StatusOr<CompressedGradients> CompressedGradients::Make(const Node& node, const AttrMap& attrs) {
  CompressedGradients made;
  made.bucket = static_cast<int>(attrs.at("bucket")->i());
  made.method = attrs.at("method")->s();
  const int64_t gradients = attrs.at("gradients")->i();
  ASSIGN_OR_RETURN(CodecOptions options, CodecOptions::Parse(attrs.at("options")->s()));
  int64_t state_inputs = 0;
  for (int64_t g = 0; g < gradients && g < static_cast<int64_t>(node.outputs().size()); ++g) {
    const TensorShape& shape = node.outputs()[g].shape;
    if (!shape.IsFullyDefined()) {
      return absl::FailedPreconditionError(absl::StrCat("'", node.name(), "': gradient ", g, "'s shape must be known"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<GradientCodec> codec, CodecRegistry::Global().Create(made.method));
    if (absl::Status s = codec->Init(shape.dims(), options); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("'", node.name(), "' (", made.method, ") gradient ", g, ": ", s.message()));
    }
    CompressedGradient slot;
    slot.step.layer = attrs.at("layer")->i() + g;
    slot.step.seed = attrs.at("seed")->i();
    slot.states = static_cast<int>(codec->State().size());
    slot.elements = ElementCount(shape.dims());
    state_inputs += slot.states;
    slot.codec = std::move(codec);
    made.gradients.push_back(std::move(slot));
  }
  if (gradients < 1 || static_cast<int64_t>(made.gradients.size()) != gradients ||
      node.num_inputs() != gradients + state_inputs) {
    return absl::FailedPreconditionError(absl::StrCat("'", node.name(), "': ", gradients, " gradients whose ",
                                                      made.method, " codecs keep ", state_inputs,
                                                      " state tensors, but the node has ", node.num_inputs(),
                                                      " inputs and ", node.outputs().size(), " outputs"));
  }
  return made;
}

}  // namespace nereid
