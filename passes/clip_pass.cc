// clip(max_norm=M): gradient clipping by global norm, as
// torch.nn.utils.clip_grad_norm_: every gradient the optimizer reads is
// multiplied by min(1, M / (||all gradients||_2 + 1e-6)). It reads the
// gradients the optimizer would (each Gradient node's input), so after
// data_parallel the norm is that of the averaged gradient, the same on every
// rank; data_parallel and compress therefore run before it (the manager
// refuses the other order).
//
// A model-parallel group's shards (hybrid_partition) hold parts of one
// gradient each: their squares are summed over the group, so every member
// takes the norm of the whole model and scales by the same factor. A shard's
// Gradient node multiplies it by its gradient_scale (1/group): the norm counts
// it so, by scaling its sum of squares.

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

class ClipPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const double max_norm = context.options.GetFloat("max_norm");
    if (!(max_norm > 0)) return absl::InvalidArgumentError(absl::StrCat("clip: max_norm must be > 0, got ", max_norm));
    ASSIGN_OR_RETURN(std::vector<GradientOfParameter> grads, FindGradients(graph));
    std::vector<NodeOut> values, whole;
    std::map<std::string, Shards> shards;  // by group
    for (const GradientOfParameter& g : grads) {
      const Edge* in = g.gradient->input_edge(0);
      values.push_back(NodeOut{in->src, in->src_port});
      const std::string group = NodeAttrString(*g.parameter, "shard_group");
      const float scale = GradientScale(*g.gradient);
      if (group.empty() && scale == 1.0f) {
        whole.push_back(values.back());
      } else {  // a shard, or a gradient the Gradient node scales: its squares, scaled, in its group's sum
        shards[group].size = NodeAttrInt(*g.parameter, "shard_count", 1);
        shards[group].by_scale[scale].push_back(values.back());
      }
    }
    for (const auto& [group, s] : shards) {
      ASSIGN_OR_RETURN(whole.emplace_back(), GroupNorm(graph, group, s));
    }
    ASSIGN_OR_RETURN(Node * factor, AddOpNode(&graph, "clip/factor", "GlobalNormClipFactor", whole,
                                              {{"max_norm", FloatAttr(static_cast<float>(max_norm))}}));
    for (size_t i = 0; i < grads.size(); ++i) {
      ASSIGN_OR_RETURN(Node * clipped, AddOpNode(&graph, absl::StrCat(grads[i].parameter->name(), "/clipped"), "Mul",
                                                 {values[i], NodeOut{factor, 0}}));
      RETURN_IF_ERROR(graph.ReplaceInput(grads[i].gradient, 0, clipped, 0));
    }
    log->notes.push_back(absl::StrCat("clips ", grads.size(), " gradients to a global norm of at most ", max_norm,
                                      shards.empty() ? "" : ", the shards' squares summed over their group"));
    return absl::OkStatus();
  }

 private:
  struct Shards {
    int64_t size = 1;  // the group's ranks
    // This rank's gradients (their Gradient nodes' inputs), by the scale the
    // Gradient node multiplies them by (a shard's gradient_scale, 1/group).
    std::map<float, std::vector<NodeOut>> by_scale;
  };

  // What a Gradient node multiplies its input by.
  static float GradientScale(const Node& gradient) {
    auto scale = gradient.def().attr().find("scale");
    return scale == gradient.def().attr().end() ? 1.0f : scale->second.f();
  }

  // sqrt(the group's sum of the squares of its gradients, as the optimizer
  // reads them): a value whose square is their share of the global norm. A
  // scale multiplies the scalar sum of squares (by scale^2), not the tensors.
  // The group "" is this rank's own scaled gradients: summed, not exchanged.
  static absl::StatusOr<NodeOut> GroupNorm(Graph& graph, const std::string& group, const Shards& shards) {
    const std::string prefix = group.empty() ? "clip/scaled" : absl::StrCat("clip/", group);
    std::vector<NodeOut> sums;
    for (const auto& [scale, parts] : shards.by_scale) {
      const std::string name = absl::StrCat(prefix, "/squares", sums.empty() ? "" : absl::StrCat(sums.size()));
      ASSIGN_OR_RETURN(Node * squares, AddOpNode(&graph, name, "SquaredNorm", parts));
      sums.push_back(NodeOut{squares, 0});
      if (scale == 1.0f) continue;
      ASSIGN_OR_RETURN(Node * factor, AddOpNode(&graph, absl::StrCat(name, "/scale_squared"), "Const", {},
                                                {{"value", ScalarConstValue(scale * scale)}}));
      ASSIGN_OR_RETURN(Node * scaled,
                       AddOpNode(&graph, absl::StrCat(name, "/scaled"), "Mul", {sums.back(), NodeOut{factor, 0}}));
      sums.back() = NodeOut{scaled, 0};
    }
    NodeOut sum = sums.front();
    if (sums.size() > 1) {
      ASSIGN_OR_RETURN(Node * added, AddOpNode(&graph, absl::StrCat(prefix, "/squares_sum"), "AddN", sums));
      sum = NodeOut{added, 0};
    }
    if (!group.empty()) {
      ASSIGN_OR_RETURN(Node * summed, AddOpNode(&graph, absl::StrCat(prefix, "/sum"), "GroupAllReduce", {sum},
                                                {{"group", StringAttr(group)}, {"group_size", IntAttr(shards.size)}}));
      sum = NodeOut{summed, 0};
    }
    ASSIGN_OR_RETURN(Node * norm, AddOpNode(&graph, absl::StrCat(prefix, "/norm"), "Sqrt", {sum}));
    return NodeOut{norm, 0};
  }
};

PassInfo ClipInfo() {
  PassInfo info{"clip",
                "Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_): every gradient scaled by "
                "min(1, max_norm / norm), the norm taken over all of them after any allreduce.",
                {{"max_norm", OptionType::kFloat, "1", "the largest global L2 norm the optimizer sees"}},
                [] { return std::make_unique<ClipPass>(); }};
  info.needs = {kGradientsProperty};
  info.provides = {kClippedProperty};
  info.precedes = {kOptimizerProperty};
  return info;
}

NEREID_REGISTER_PASS(ClipInfo());

}  // namespace
}  // namespace nereid
