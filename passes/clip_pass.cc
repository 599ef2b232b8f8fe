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
// takes the norm of the whole model and scales by the same factor.

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
      ASSIGN_OR_RETURN(NodeOut counted, AsTheOptimizerSeesIt(graph, g, values.back()));
      const std::string group = NodeAttrString(*g.parameter, "shard_group");
      if (group.empty()) {
        whole.push_back(counted);
      } else {
        shards[group].size = NodeAttrInt(*g.parameter, "shard_count", 1);
        shards[group].parts.push_back(counted);
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
    int64_t size = 1;            // the group's ranks
    std::vector<NodeOut> parts;  // this rank's shards' gradients
  };

  // The Gradient node multiplies its input by the parameter's gradient_scale
  // (a shard's 1/group): the norm is of what comes out, so it counts `value`
  // times that scale.
  static absl::StatusOr<NodeOut> AsTheOptimizerSeesIt(Graph& graph, const GradientOfParameter& g, NodeOut value) {
    auto scale = g.gradient->def().attr().find("scale");
    if (scale == g.gradient->def().attr().end() || scale->second.f() == 1.0f) return value;
    const std::string prefix = absl::StrCat(g.parameter->name(), "/grad/");
    ASSIGN_OR_RETURN(Node * factor, AddOpNode(&graph, absl::StrCat(prefix, "norm_scale"), "Const", {},
                                              {{"value", ScalarConstValue(scale->second.f())}}));
    ASSIGN_OR_RETURN(Node * scaled,
                     AddOpNode(&graph, absl::StrCat(prefix, "for_norm"), "Mul", {value, NodeOut{factor, 0}}));
    return NodeOut{scaled, 0};
  }

  // sqrt(the group's sum of the squares of its shards): a value whose square
  // is the shards' share of the global norm.
  static absl::StatusOr<NodeOut> GroupNorm(Graph& graph, const std::string& group, const Shards& shards) {
    ASSIGN_OR_RETURN(Node * squares,
                     AddOpNode(&graph, absl::StrCat("clip/", group, "/squares"), "SquaredNorm", shards.parts));
    ASSIGN_OR_RETURN(Node * summed, AddOpNode(&graph, absl::StrCat("clip/", group, "/sum"), "GroupAllReduce",
                                              {NodeOut{squares, 0}},
                                              {{"group", StringAttr(group)}, {"group_size", IntAttr(shards.size)}}));
    ASSIGN_OR_RETURN(Node * norm, AddOpNode(&graph, absl::StrCat("clip/", group, "/norm"), "Sqrt", {NodeOut{summed, 0}}));
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
