#include "graph/import_export.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/errors.h"

namespace nereid {

absl::StatusOr<InputRef> ParseInputRef(absl::string_view text) {
  InputRef ref;
  if (!text.empty() && text[0] == '^') {
    ref.control = true;
    text.remove_prefix(1);
    ref.port = kControlPort;
  }
  size_t colon = text.rfind(':');
  if (colon != absl::string_view::npos && !ref.control) {
    absl::string_view port = text.substr(colon + 1);
    bool digits = !port.empty() && port.size() <= 9;
    for (char c : port) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (!digits || !absl::SimpleAtoi(port, &ref.port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", text, "' has a bad port '", port, "' (expected node:port, port >= 0)"));
    }
    text = text.substr(0, colon);
  }
  if (text.empty()) return absl::InvalidArgumentError("an input names no node");
  ref.node = std::string(text);
  return ref;
}

absl::StatusOr<std::unique_ptr<Graph>> ImportGraph(const GraphFile& file) {
  auto graph = std::make_unique<Graph>();
  graph->set_source_path(file.path);
  *graph->mutable_header() = file.def;
  graph->mutable_header()->clear_node();
  const GraphDef& def = file.def;
  auto location = [&](int i) {
    return i < static_cast<int>(file.node_locations.size()) ? file.node_locations[i] : SourceLocation{};
  };
  std::vector<Node*> nodes(def.node_size());
  for (int i = 0; i < def.node_size(); ++i) {
    const NodeDef& nd = def.node(i);
    std::string where = DescribeNode(file.path, location(i), nd.name().empty() ? "<unnamed>" : nd.name(), nd.op());
    if (nd.name().empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": node has no name"));
    int data_inputs = 0;
    bool seen_control = false;
    for (const std::string& in : nd.input()) {
      if (!in.empty() && in[0] == '^') {
        seen_control = true;
      } else if (seen_control) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": data input '", in, "' comes after a control input; list data inputs first"));
      } else {
        ++data_inputs;
      }
    }
    if (Node* existing = graph->FindNode(nd.name())) {
      SourceLocation first = existing->location();
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": duplicate node name '", nd.name(), "'",
          first.line > 0 ? absl::StrCat(" (first defined at line ", first.line, ")") : std::string()));
    }
    auto added = graph->AddNode(nd, data_inputs);
    if (!added.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", added.status().message()));
    nodes[i] = *added;
    nodes[i]->set_location(location(i));
  }
  for (int i = 0; i < def.node_size(); ++i) {
    Node* dst = nodes[i];
    int port = 0;
    for (const std::string& in : def.node(i).input()) {
      auto ref = ParseInputRef(in);
      if (!ref.ok()) return NodeError(*graph, *dst, ref.status().message());
      Node* src = graph->FindNode(ref->node);
      if (src == nullptr) {
        return NodeError(*graph, *dst,
                         absl::StrCat("input '", in, "' names node '", ref->node, "', which does not exist"));
      }
      if (ref->control) {
        graph->AddControlEdge(src, dst);
        continue;
      }
      auto edge = graph->AddEdge(src, ref->port, dst, port++);
      if (!edge.ok()) return NodeError(*graph, *dst, edge.status().message());
    }
  }
  return graph;
}

absl::StatusOr<std::unique_ptr<Graph>> ImportGraphDef(const GraphDef& def) {
  GraphFile file;
  file.def = def;
  return ImportGraph(file);
}

GraphDef ExportGraph(const Graph& graph) {
  GraphDef def = graph.header();
  def.clear_node();
  for (const Node* node : graph.nodes()) {
    NodeDef* nd = def.add_node();
    *nd = node->def();
    nd->clear_input();
    for (int p = 0; p < node->num_inputs(); ++p) {
      const Edge* e = node->input_edge(p);
      // An unconnected slot cannot be written as text; passes must not leave
      // one behind, and validation reports it before export is reached.
      if (e == nullptr) continue;
      nd->add_input(e->src_port == 0 ? e->src->name() : absl::StrCat(e->src->name(), ":", e->src_port));
    }
    for (const Edge* e : node->control_inputs()) nd->add_input(absl::StrCat("^", e->src->name()));
  }
  return def;
}

}  // namespace nereid
