// adam: Adam with bias correction (or AdamW with decoupled=true). Per
// parameter: ApplyAdam '<param>/adam' and two moment Parameters '<param>/m'
// and '<param>/v', each carried to the next step by a Feedback.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"

namespace nereid {
namespace {

class AdamPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    double beta1 = o.GetFloat("beta1"), beta2 = o.GetFloat("beta2");
    if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) {
      return absl::InvalidArgumentError("adam: beta1 and beta2 must be in [0, 1)");
    }
    ASSIGN_OR_RETURN(std::vector<GradientOfParameter> grads, FindGradients(graph));
    ASSIGN_OR_RETURN(Node * lr, AddLearningRate(graph, o));
    for (const GradientOfParameter& g : grads) {
      ASSIGN_OR_RETURN(Node * m, AddStateLike(graph, *g.parameter, "m"));
      ASSIGN_OR_RETURN(Node * v, AddStateLike(graph, *g.parameter, "v"));
      ASSIGN_OR_RETURN(Node * update,
                       AddOpNode(&graph, absl::StrCat(g.parameter->name(), "/adam"), "ApplyAdam",
                                 {{g.parameter, 0}, {g.gradient, 0}, {lr, 0}, {m, 0}, {v, 0}},
                                 {{"beta1", FloatAttr(static_cast<float>(beta1))},
                                  {"beta2", FloatAttr(static_cast<float>(beta2))},
                                  {"epsilon", FloatAttr(static_cast<float>(o.GetFloat("epsilon")))},
                                  {"weight_decay", FloatAttr(static_cast<float>(o.GetFloat("weight_decay")))},
                                  {"decoupled", BoolAttr(o.GetBool("decoupled"))}}));
      RETURN_IF_ERROR(CloseLoop(graph, g.parameter, {update, 0}));
      RETURN_IF_ERROR(CloseLoop(graph, m, {update, 1}));
      RETURN_IF_ERROR(CloseLoop(graph, v, {update, 2}));
    }
    ASSIGN_OR_RETURN(int state, CloseStateUpdates(graph));
    log->notes.push_back(absl::StrCat("updates ", grads.size(), " parameters with ", 2 * grads.size(),
                                      " moment buffers", state > 0 ? absl::StrCat("; carries ", state, " running statistics") : ""));
    return absl::OkStatus();
  }
};

std::vector<PassOptionSpec> AdamOptions() {
  std::vector<PassOptionSpec> options = LearningRateOptions("0.001");
  options.push_back({"beta1", OptionType::kFloat, "0.9", "first-moment decay"});
  options.push_back({"beta2", OptionType::kFloat, "0.999", "second-moment decay"});
  options.push_back({"epsilon", OptionType::kFloat, "1e-8", "added to the denominator"});
  options.push_back({"weight_decay", OptionType::kFloat, "0", "L2 penalty (or decoupled decay)"});
  options.push_back({"decoupled", OptionType::kBool, "false", "AdamW: decay the weights directly"});
  return options;
}

NEREID_REGISTER_PASS(OptimizerPassInfo("adam", "Adam with bias correction; AdamW with decoupled=true.", AdamOptions(),
                                       [] { return std::make_unique<AdamPass>(); }));

}  // namespace
}  // namespace nereid
