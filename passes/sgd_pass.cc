// sgd: stochastic gradient descent with momentum (heavy ball or Nesterov) and
// L2 weight decay, the arithmetic of torch.optim.SGD. Per parameter: an
// ApplySgd node '<param>/sgd', a velocity Parameter '<param>/momentum' when
// momentum > 0, and Feedback nodes carrying both to the next step.

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/gradient_builder.h"
#include "passes/optimizer_common.h"

namespace nereid {
namespace {

class SgdPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& o = context.options;
    double momentum = o.GetFloat("momentum");
    if (momentum < 0 || momentum >= 1) return absl::InvalidArgumentError("sgd: momentum must be in [0, 1)");
    if (o.GetBool("nesterov") && momentum == 0) return absl::InvalidArgumentError("sgd: nesterov needs momentum > 0");
    if (absl::Status once = CheckMomentumAppliedOnce(graph, momentum); !once.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sgd: ", once.message()));
    }
    ASSIGN_OR_RETURN(std::vector<GradientOfParameter> grads, FindGradients(graph));
    ASSIGN_OR_RETURN(Node * lr, AddLearningRate(graph, o));
    for (const GradientOfParameter& g : grads) {
      std::vector<NodeOut> inputs = {{g.parameter, 0}, {g.gradient, 0}, {lr, 0}};
      Node* velocity = nullptr;
      if (momentum > 0) {
        ASSIGN_OR_RETURN(velocity, AddStateLike(graph, *g.parameter, "momentum"));
        inputs.push_back({velocity, 0});
      }
      ASSIGN_OR_RETURN(Node * update,
                       AddOpNode(&graph, absl::StrCat(g.parameter->name(), "/sgd"), "ApplySgd", inputs,
                                 {{"momentum", FloatAttr(static_cast<float>(momentum))},
                                  {"nesterov", BoolAttr(o.GetBool("nesterov"))},
                                  {"weight_decay", FloatAttr(static_cast<float>(o.GetFloat("weight_decay")))}}));
      RETURN_IF_ERROR(CloseLoop(graph, g.parameter, {update, 0}));
      if (velocity != nullptr) RETURN_IF_ERROR(CloseLoop(graph, velocity, {update, 1}));
    }
    ASSIGN_OR_RETURN(int state, CloseStateUpdates(graph));
    log->notes.push_back(absl::StrCat("updates ", grads.size(), " parameters",
                                      momentum > 0 ? absl::StrCat(", with ", grads.size(), " momentum buffers") : "",
                                      state > 0 ? absl::StrCat("; carries ", state, " running statistics") : ""));
    return absl::OkStatus();
  }
};

std::vector<PassOptionSpec> SgdOptions() {
  std::vector<PassOptionSpec> options = LearningRateOptions("0.01");
  options.push_back({"momentum", OptionType::kFloat, "0", "momentum factor in [0, 1)"});
  options.push_back({"nesterov", OptionType::kBool, "false", "Nesterov momentum"});
  options.push_back({"weight_decay", OptionType::kFloat, "0", "L2 penalty added to the gradient"});
  return options;
}

NEREID_REGISTER_PASS(OptimizerPassInfo("sgd", "SGD with momentum, Nesterov and weight decay (torch.optim.SGD's arithmetic).",
                                       SgdOptions(), [] { return std::make_unique<SgdPass>(); }));

}  // namespace
}  // namespace nereid
