#ifndef NEREID_GRAPH_IR_H_
#define NEREID_GRAPH_IR_H_

// The in-memory graph that passes edit. A Graph owns Nodes and Edges; an Edge
// joins an output port of one node to an input port of another, or is a
// control edge (ports kControlPort on both ends). Every operation that edits
// the graph keeps both ends consistent: a node's input slots and its outgoing
// edge list always describe the same edges. Adding, removing and rewiring are
// O(degree); node lookup by name is a hash lookup.
//
// Node ids are stable for the life of the graph and increase in insertion
// order; removed ids are not reused, so id order is the order nodes were added
// (export writes nodes in that order, which keeps round trips exact).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor_shape.h"
#include "graph/graph.pb.h"

namespace nereid {

inline constexpr int kControlPort = -1;

class Node;

struct Edge {
  int id = -1;
  Node* src = nullptr;
  int src_port = 0;
  Node* dst = nullptr;
  int dst_port = 0;
  bool IsControl() const { return src_port == kControlPort; }
};

// Where a node came from in a text graph file (1-based; 0 when unknown).
struct SourceLocation {
  int line = 0;
  int column = 0;
};

// One output of a node: what an input edge refers to.
struct NodeOut {
  Node* node = nullptr;
  int port = 0;
};

struct ShapeAndType {
  TensorShape shape;
  DataType dtype = DT_INVALID;
};

class Node {
 public:
  int id() const { return id_; }
  const std::string& name() const { return def_.name(); }
  const std::string& op() const { return def_.op(); }

  // The node's definition without its inputs (edges hold those): op, attrs
  // and placement. Passes edit attrs through mutable_def().
  const NodeDef& def() const { return def_; }
  NodeDef* mutable_def() { return &def_; }

  // Data inputs by port; an entry is null while that port is unconnected.
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Edge* input_edge(int port) const { return inputs_[port]; }
  const std::vector<const Edge*>& control_inputs() const { return control_inputs_; }
  // Outgoing data and control edges, in no particular order.
  const std::vector<const Edge*>& out_edges() const { return out_edges_; }

  const SourceLocation& location() const { return location_; }
  void set_location(SourceLocation location) { location_ = location; }

  // Filled in by shape inference.
  const std::vector<ShapeAndType>& outputs() const { return outputs_; }
  void set_outputs(std::vector<ShapeAndType> outputs) { outputs_ = std::move(outputs); }

 private:
  friend class Graph;
  int id_ = -1;
  NodeDef def_;
  std::vector<const Edge*> inputs_;
  std::vector<const Edge*> control_inputs_;
  std::vector<const Edge*> out_edges_;
  SourceLocation location_;
  std::vector<ShapeAndType> outputs_;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Adds a node from `def` (its `input` field is ignored: connect with
  // AddEdge) with `num_inputs` unconnected data input slots. Fails if the name
  // is empty or taken.
  absl::StatusOr<Node*> AddNode(NodeDef def, int num_inputs);

  // Connects src:src_port to dst:dst_port. Fails if the slot is out of range
  // or already connected. A negative src_port is refused (use AddControlEdge).
  absl::StatusOr<const Edge*> AddEdge(Node* src, int src_port, Node* dst, int dst_port);
  // Adds "^src" to dst's control inputs (a no-op if it is already there).
  const Edge* AddControlEdge(Node* src, Node* dst);

  void RemoveEdge(const Edge* edge);
  // Removes the node and every edge touching it.
  void RemoveNode(Node* node);

  // Points dst:dst_port at new_src:new_src_port instead of its current input.
  absl::Status ReplaceInput(Node* dst, int dst_port, Node* new_src, int new_src_port);
  // Moves every consumer of old_src:old_port (data edges) to new_src:new_port.
  absl::Status RedirectOutput(Node* old_src, int old_port, Node* new_src, int new_port);

  // Grows or shrinks a node's data input slots (for variadic ops); slots
  // removed must be unconnected.
  absl::Status SetNumInputs(Node* node, int num_inputs);

  Node* FindNode(absl::string_view name) const;

  // Live nodes in id order.
  std::vector<Node*> nodes() const;
  int num_nodes() const { return static_cast<int>(by_name_.size()); }
  int num_edges() const { return num_edges_; }

  // The file the graph was loaded from ("" if built in memory), for errors.
  const std::string& source_path() const { return source_path_; }
  void set_source_path(std::string path) { source_path_ = std::move(path); }

  // Graph-level fields of the GraphDef (version, attrs, loop scopes).
  const GraphDef& header() const { return header_; }
  GraphDef* mutable_header() { return &header_; }

 private:
  // Creates an edge and lists it among src's outputs; the caller records it
  // at the destination.
  const Edge* NewEdge(Node* src, int src_port, Node* dst, int dst_port);

  std::vector<std::unique_ptr<Node>> nodes_;  // by id; null once removed
  std::vector<std::unique_ptr<Edge>> edges_;  // by id; null once removed
  absl::flat_hash_map<std::string, Node*> by_name_;
  int num_edges_ = 0;
  std::string source_path_;
  GraphDef header_;  // node list always empty
};

// The string value of the graph header's attribute `key` ("" when absent).
std::string GraphAttr(const Graph& graph, absl::string_view key);
// Its integer value, or `otherwise` when absent.
int64_t GraphAttrInt(const Graph& graph, absl::string_view key, int64_t otherwise);

// A node's attribute `key` as it is written in the node (not the op's
// default), or `otherwise` when the node does not set it.
std::string NodeAttrString(const Node& node, absl::string_view key, const std::string& otherwise = "");
int64_t NodeAttrInt(const Node& node, absl::string_view key, int64_t otherwise);
bool NodeAttrBool(const Node& node, absl::string_view key, bool otherwise);

}  // namespace nereid

#endif  // NEREID_GRAPH_IR_H_
