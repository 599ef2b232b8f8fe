#ifndef NEREID_OPS_GRADIENT_BUILDER_H_
#define NEREID_OPS_GRADIENT_BUILDER_H_

// What an op's gradient function sees: the forward node, its inputs and
// outputs, the gradients flowing into its outputs, and a way to add nodes.
// Gradient nodes are named after the forward node so a person can follow
// them: the gradient of MatMul 'fc1/matmul' with respect to input 'a' is
// 'fc1/matmul/grad/a'.
//
//   .SetGradient([](GradientBuilder& g) -> GradResult {
//     ASSIGN_OR_RETURN(NodeOut dy, g.output_grad(0));
//     ASSIGN_OR_RETURN(NodeOut dx, g.Add("x", "ReluGrad", {dy, g.output(0)}));
//     return GradResult{dx};
//   })

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "graph/ir.h"
#include "ops/op_registry.h"

namespace nereid {

using GradResult = std::vector<std::optional<NodeOut>>;

class GradientBuilder {
 public:
  GradientBuilder(Graph* graph, Node* node, std::vector<std::optional<NodeOut>> output_grads)
      : graph_(graph), node_(node), output_grads_(std::move(output_grads)) {}

  Graph& graph() { return *graph_; }
  const Node& node() const { return *node_; }
  // The value feeding input i of the forward node.
  NodeOut input(int i) const;
  NodeOut output(int i) const { return NodeOut{node_, i}; }
  // The gradient flowing into output i; an error if none does (the autodiff
  // pass only calls a gradient function when output 0's gradient exists).
  absl::StatusOr<NodeOut> output_grad(int i) const;
  bool has_output_grad(int i) const;
  // The forward node's attribute (with the op's default filled in).
  const AttrValue& attr(absl::string_view name) const;

  // Adds "<node>/grad/<suffix>" computing `op` on `inputs`, and returns its
  // output 0. Fails if the name is taken.
  absl::StatusOr<NodeOut> Add(absl::string_view suffix, absl::string_view op, const std::vector<NodeOut>& inputs,
                              std::vector<std::pair<std::string, AttrValue>> attrs = {});
  // Same, copying the named attributes from the forward node.
  absl::StatusOr<NodeOut> AddWithAttrsOf(absl::string_view suffix, absl::string_view op,
                                         const std::vector<NodeOut>& inputs,
                                         const std::vector<std::string>& forward_attrs);

 private:
  Graph* graph_;
  Node* node_;
  std::vector<std::optional<NodeOut>> output_grads_;
};

// The registration of a gradient op: float inputs named `inputs`, one output
// with the shape and dtype of input `shape_from`, no FLOP estimate (gradient
// ops are not part of the forward cost), and no gradient of its own.
OpDefBuilder GradientOp(const char* name, const char* summary, const std::vector<const char*>& inputs,
                        int shape_from);

// An elementwise op x -> y of x's shape and dtype costing `flops_per_element`,
// whose gradient is `grad`.
OpDefBuilder UnaryOp(const char* name, const char* summary, int64_t flops_per_element, GradFn grad);

// The gradient of an elementwise y = f(x) through one gradient op:
// dx = GRAD_OP(dy, y) when f' is cheapest from the output (exp, sigmoid,
// sqrt), dx = GRAD_OP(dy, x) when it needs the input (erf, GELU, clip). The
// gradient op gets the forward node's `attrs` (clip's bounds).
GradFn GradientThroughOutput(const char* grad_op, std::vector<std::string> attrs = {});
GradFn GradientThroughInput(const char* grad_op, std::vector<std::string> attrs = {});

// Passes the output's gradient through to input 0 unchanged (Identity-like ops).
absl::StatusOr<GradResult> PassThroughGradient(GradientBuilder& g);

// Adds a node named `name` to `graph` with inputs wired, for passes.
absl::StatusOr<Node*> AddOpNode(Graph* graph, absl::string_view name, absl::string_view op,
                                const std::vector<NodeOut>& inputs,
                                std::vector<std::pair<std::string, AttrValue>> attrs = {});

}  // namespace nereid

#endif  // NEREID_OPS_GRADIENT_BUILDER_H_
