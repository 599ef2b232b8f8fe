// autodiff: reverse-mode differentiation of the scalar loss. Walks the nodes
// between the trainable parameters and the loss in reverse topological order,
// asks each op's gradient function for its input gradients, sums gradients
// where a value fans out (AddN, in a fixed order), and ends each trainable
// parameter's gradient in a Gradient node named "<param>/grad". Gradient
// nodes nobody consumes (e.g. the gradient of the input images) are removed.

#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/errors.h"
#include "ops/gradient_builder.h"
#include "ops/topo_order.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

bool IsTrainableParameter(const Node& n) {
  if (n.op() != "Parameter") return false;
  auto it = n.def().attr().find("trainable");
  return it == n.def().attr().end() || it->second.b();
}

// What the parameter's gradient is multiplied by (a shard's: 1 / group size).
float GradientScale(const Node& parameter) {
  auto it = parameter.def().attr().find("gradient_scale");
  return it == parameter.def().attr().end() ? 1.0f : it->second.f();
}

// Nodes on some path from a trainable parameter to the loss.
absl::flat_hash_set<const Node*> NodesBetween(const std::vector<Node*>& order, const Node* loss) {
  absl::flat_hash_set<const Node*> from_params, to_loss, between;
  for (Node* n : order) {
    if (IsTrainableParameter(*n)) from_params.insert(n);
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Edge* e = n->input_edge(i);
      if (e != nullptr && n->op() != "Parameter" && from_params.contains(e->src)) from_params.insert(n);
    }
  }
  to_loss.insert(loss);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!to_loss.contains(*it)) continue;
    if ((*it)->op() == "Parameter") continue;
    for (int i = 0; i < (*it)->num_inputs(); ++i) {
      const Edge* e = (*it)->input_edge(i);
      if (e != nullptr) to_loss.insert(e->src);
    }
  }
  for (const Node* n : from_params) {
    if (to_loss.contains(n)) between.insert(n);
  }
  return between;
}

class AutodiffPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    const PassOptions& options = context.options;
    for (Node* n : graph.nodes()) {
      if (n->op() == "Gradient") {
        return NodeError(graph, *n, "the graph already has gradients (autodiff ran before)");
      }
    }
    std::string loss_name = options.GetString("loss");
    if (loss_name.empty()) {
      auto it = graph.header().attr().find("loss");
      if (it == graph.header().attr().end()) {
        return absl::InvalidArgumentError(
            "autodiff needs a loss: set the graph attribute 'loss' or the option autodiff(loss=NODE)");
      }
      loss_name = it->second.s();
    }
    Node* loss = graph.FindNode(loss_name);
    if (loss == nullptr) return absl::InvalidArgumentError(absl::StrCat("the loss node '", loss_name, "' does not exist"));
    if (loss->outputs().empty() || loss->outputs()[0].shape.rank() != 0) {
      return NodeError(graph, *loss, "the loss must be a scalar");
    }
    ASSIGN_OR_RETURN(std::vector<Node*> order, TopologicalOrder(graph));
    absl::flat_hash_set<const Node*> between = NodesBetween(order, loss);
    int first_new_id = 0;
    for (Node* n : graph.nodes()) first_new_id = std::max(first_new_id, n->id() + 1);

    // Gradient contributions per (node, output port), in the order they
    // were created (deterministic: reverse topological order).
    std::map<std::pair<int, int>, std::vector<NodeOut>> contributions;
    AttrValue one;
    one.mutable_tensor()->set_dtype(DT_FLOAT);
    one.mutable_tensor()->add_float_val(1.0f);
    ASSIGN_OR_RETURN(Node * seed, AddOpNode(&graph, absl::StrCat(loss->name(), "/grad/seed"), "Const", {},
                                            {{"value", one}}));
    contributions[{loss->id(), 0}].push_back(NodeOut{seed, 0});

    int params = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* node = *it;
      if (!between.contains(node)) continue;
      int num_outputs = static_cast<int>(node->outputs().size());
      std::vector<std::optional<NodeOut>> output_grads(num_outputs);
      bool any = false;
      for (int port = 0; port < num_outputs; ++port) {
        auto c = contributions.find({node->id(), port});
        if (c == contributions.end()) continue;
        ASSIGN_OR_RETURN(output_grads[port], Sum(graph, *node, port, c->second));
        any = true;
      }
      if (!any) continue;
      if (IsTrainableParameter(*node)) {
        std::vector<std::pair<std::string, AttrValue>> attrs = {{"parameter", StringAttrOf(node->name())}};
        if (GradientScale(*node) != 1.0f) attrs.emplace_back("scale", FloatAttr(GradientScale(*node)));
        RETURN_IF_ERROR(
            AddOpNode(&graph, absl::StrCat(node->name(), "/grad"), "Gradient", {*output_grads[0]}, attrs).status());
        ++params;
        continue;
      }
      const OpDef* def = OpRegistry::Global().Find(node->op());
      if (!def->grad_fn) {
        return NodeError(graph, *node,
                         absl::StrCat("cannot differentiate through this node: ",
                                      def->no_gradient.empty() ? "its op has no gradient" : def->no_gradient));
      }
      GradientBuilder builder(&graph, node, output_grads);
      absl::StatusOr<GradResult> input_grads = def->grad_fn(builder);
      if (!input_grads.ok()) return NodeError(graph, *node, absl::StrCat("gradient: ", input_grads.status().message()));
      for (int i = 0; i < node->num_inputs() && i < static_cast<int>(input_grads->size()); ++i) {
        const Edge* e = node->input_edge(i);
        if (!(*input_grads)[i].has_value() || e == nullptr || !between.contains(e->src)) continue;
        contributions[{e->src->id(), e->src_port}].push_back(*(*input_grads)[i]);
      }
    }
    if (params == 0) return NodeError(graph, *loss, "no trainable parameter affects the loss");
    int removed = RemoveUnused(graph, first_new_id);
    log->notes.push_back(absl::StrCat("gradients for ", params, " trainable parameters of loss '", loss_name,
                                      "'; ", removed, " unneeded gradient nodes pruned"));
    return absl::OkStatus();
  }

 private:
  static AttrValue StringAttrOf(const std::string& s) {
    AttrValue v;
    v.set_s(s);
    return v;
  }

  // One contribution is used as is; several are summed by an AddN named
  // after the value they are the gradient of.
  static absl::StatusOr<NodeOut> Sum(Graph& graph, const Node& node, int port, const std::vector<NodeOut>& parts) {
    if (parts.size() == 1) return parts[0];
    std::string name = absl::StrCat(node.name(), port == 0 ? "" : absl::StrCat(":", port), "/grad_sum");
    ASSIGN_OR_RETURN(Node * sum, AddOpNode(&graph, name, "AddN", parts));
    return NodeOut{sum, 0};
  }

  // Removes nodes added by this pass whose outputs nobody reads (dead
  // gradients), repeatedly, newest first.
  static int RemoveUnused(Graph& graph, int first_new_id) {
    int removed = 0;
    std::vector<Node*> nodes = graph.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = *it;
      if (n->id() < first_new_id) break;
      if (n->op() == "Gradient" || !n->out_edges().empty()) continue;
      graph.RemoveNode(n);
      ++removed;
    }
    return removed;
  }
};

PassInfo AutodiffInfo() {
  PassInfo info{"autodiff",
                "Adds the backward graph of the scalar loss: a Gradient node '<param>/grad' per trainable parameter.",
                {{"loss", OptionType::kString, "", "the loss node (default: the graph attribute 'loss')"}},
                [] { return std::make_unique<AutodiffPass>(); }};
  info.provides = {kGradientsProperty};
  return info;
}

NEREID_REGISTER_PASS(AutodiffInfo());

}  // namespace
}  // namespace nereid
