#include "graph/dot_export.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace nereid {
namespace {

std::string Quote(absl::string_view s) {
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

std::string OutputLabel(const Node& node) {
  if (node.outputs().empty()) return "";
  const ShapeAndType& out = node.outputs()[0];
  return absl::StrCat(out.shape.ToString(), " ", DataTypeName(out.dtype));
}

}  // namespace

std::string GraphToDot(const Graph& graph) {
  std::string dot = "digraph nereid {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n";
  for (const Node* node : graph.nodes()) {
    std::string style;
    if (node->op() == "Parameter") style = ", shape=ellipse, style=filled, fillcolor=\"#e8f0fe\"";
    if (node->op() == "Input") style = ", shape=invhouse, style=filled, fillcolor=\"#e6f4ea\"";
    std::string label = absl::StrCat(node->name(), "\\n", node->op());
    std::string shape = OutputLabel(*node);
    if (!shape.empty()) absl::StrAppend(&label, "\\n", shape);
    absl::StrAppend(&dot, "  ", Quote(node->name()), " [label=\"",
                    absl::StrReplaceAll(label, {{"\"", "\\\""}}), "\"", style, "];\n");
  }
  for (const Node* node : graph.nodes()) {
    for (int p = 0; p < node->num_inputs(); ++p) {
      const Edge* e = node->input_edge(p);
      if (e == nullptr) continue;
      std::string attrs = node->op() == "Feedback" ? " [color=red, constraint=false]" : "";
      absl::StrAppend(&dot, "  ", Quote(e->src->name()), " -> ", Quote(node->name()), attrs, ";\n");
    }
    for (const Edge* e : node->control_inputs()) {
      absl::StrAppend(&dot, "  ", Quote(e->src->name()), " -> ", Quote(node->name()), " [style=dashed];\n");
    }
  }
  dot += "}\n";
  return dot;
}

}  // namespace nereid
