#include "graph/ir.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace {

void EraseOne(std::vector<const Edge*>& list, const Edge* edge) {
  auto it = std::find(list.begin(), list.end(), edge);
  if (it == list.end()) return;
  *it = list.back();
  list.pop_back();
}

}  // namespace

absl::StatusOr<Node*> Graph::AddNode(NodeDef def, int num_inputs) {
  if (def.name().empty()) return absl::InvalidArgumentError("a node has an empty name");
  if (by_name_.contains(def.name())) {
    return absl::AlreadyExistsError(absl::StrCat("duplicate node name '", def.name(), "'"));
  }
  if (num_inputs < 0) return absl::InvalidArgumentError("negative input count");
  auto node = std::make_unique<Node>();
  node->id_ = static_cast<int>(nodes_.size());
  def.clear_input();
  node->def_ = std::move(def);
  node->inputs_.assign(num_inputs, nullptr);
  Node* raw = node.get();
  by_name_[raw->name()] = raw;
  nodes_.push_back(std::move(node));
  return raw;
}

absl::StatusOr<const Edge*> Graph::AddEdge(Node* src, int src_port, Node* dst, int dst_port) {
  if (src_port < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative output port ", src_port, " of node '", src->name(), "'"));
  }
  if (dst_port < 0 || dst_port >= dst->num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", dst->name(), "' has no input ", dst_port,
                                                   " (it has ", dst->num_inputs(), ")"));
  }
  if (dst->inputs_[dst_port] != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("input ", dst_port, " of node '", dst->name(), "' is already connected"));
  }
  const Edge* edge = NewEdge(src, src_port, dst, dst_port);
  dst->inputs_[dst_port] = edge;
  return edge;
}

const Edge* Graph::NewEdge(Node* src, int src_port, Node* dst, int dst_port) {
  auto edge = std::make_unique<Edge>();
  edge->id = static_cast<int>(edges_.size());
  edge->src = src;
  edge->src_port = src_port;
  edge->dst = dst;
  edge->dst_port = dst_port;
  const Edge* raw = edge.get();
  edges_.push_back(std::move(edge));
  src->out_edges_.push_back(raw);
  ++num_edges_;
  return raw;
}

const Edge* Graph::AddControlEdge(Node* src, Node* dst) {
  for (const Edge* e : dst->control_inputs_) {
    if (e->src == src) return e;
  }
  const Edge* edge = NewEdge(src, kControlPort, dst, kControlPort);
  dst->control_inputs_.push_back(edge);
  return edge;
}

void Graph::RemoveEdge(const Edge* edge) {
  if (edge->IsControl()) {
    EraseOne(edge->dst->control_inputs_, edge);
  } else {
    edge->dst->inputs_[edge->dst_port] = nullptr;
  }
  EraseOne(edge->src->out_edges_, edge);
  edges_[edge->id].reset();
  --num_edges_;
}

void Graph::RemoveNode(Node* node) {
  while (!node->out_edges_.empty()) RemoveEdge(node->out_edges_.back());
  while (!node->control_inputs_.empty()) RemoveEdge(node->control_inputs_.back());
  for (const Edge* e : node->inputs_) {
    if (e != nullptr) RemoveEdge(e);
  }
  by_name_.erase(node->name());
  nodes_[node->id_].reset();
}

absl::Status Graph::ReplaceInput(Node* dst, int dst_port, Node* new_src, int new_src_port) {
  if (dst_port < 0 || dst_port >= dst->num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", dst->name(), "' has no input ", dst_port));
  }
  if (const Edge* old = dst->inputs_[dst_port]) RemoveEdge(old);
  return AddEdge(new_src, new_src_port, dst, dst_port).status();
}

absl::Status Graph::RedirectOutput(Node* old_src, int old_port, Node* new_src, int new_port) {
  std::vector<std::pair<Node*, int>> consumers;
  for (const Edge* e : old_src->out_edges_) {
    if (!e->IsControl() && e->src_port == old_port) consumers.emplace_back(e->dst, e->dst_port);
  }
  for (auto& [dst, port] : consumers) {
    absl::Status status = ReplaceInput(dst, port, new_src, new_port);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Graph::SetNumInputs(Node* node, int num_inputs) {
  if (num_inputs < 0) return absl::InvalidArgumentError("negative input count");
  for (int i = num_inputs; i < node->num_inputs(); ++i) {
    if (node->inputs_[i] != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("input ", i, " of node '", node->name(), "' is still connected"));
    }
  }
  node->inputs_.resize(num_inputs, nullptr);
  return absl::OkStatus();
}

Node* Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> live;
  live.reserve(by_name_.size());
  for (const auto& n : nodes_) {
    if (n != nullptr) live.push_back(n.get());
  }
  return live;
}

std::string GraphAttr(const Graph& graph, absl::string_view key) {
  auto it = graph.header().attr().find(std::string(key));
  return it == graph.header().attr().end() ? "" : it->second.s();
}

int64_t GraphAttrInt(const Graph& graph, absl::string_view key, int64_t otherwise) {
  auto it = graph.header().attr().find(std::string(key));
  return it == graph.header().attr().end() ? otherwise : it->second.i();
}

std::string NodeAttrString(const Node& node, absl::string_view key, const std::string& otherwise) {
  auto it = node.def().attr().find(std::string(key));
  return it == node.def().attr().end() ? otherwise : it->second.s();
}

int64_t NodeAttrInt(const Node& node, absl::string_view key, int64_t otherwise) {
  auto it = node.def().attr().find(std::string(key));
  return it == node.def().attr().end() ? otherwise : it->second.i();
}

bool NodeAttrBool(const Node& node, absl::string_view key, bool otherwise) {
  auto it = node.def().attr().find(std::string(key));
  return it == node.def().attr().end() ? otherwise : it->second.b();
}

}  // namespace nereid
