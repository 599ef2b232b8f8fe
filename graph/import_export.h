#ifndef NEREID_GRAPH_IMPORT_EXPORT_H_
#define NEREID_GRAPH_IMPORT_EXPORT_H_

// GraphDef <-> Graph. Import checks what the IR itself needs (unique names,
// inputs that name existing nodes, well-formed "node:port" strings, data
// inputs before control inputs); op-level checks are validation's job.
// Export writes nodes in id order with inputs as "node", "node:port" (port
// > 0) and "^node", so a canonical GraphDef round-trips exactly.

#include <memory>

#include "absl/status/statusor.h"
#include "graph/graph_io.h"
#include "graph/ir.h"

namespace nereid {

absl::StatusOr<std::unique_ptr<Graph>> ImportGraph(const GraphFile& file);
absl::StatusOr<std::unique_ptr<Graph>> ImportGraphDef(const GraphDef& def);

GraphDef ExportGraph(const Graph& graph);

// Splits "node:port" / "node" / "^node"; an error names what is malformed.
struct InputRef {
  std::string node;
  int port = 0;
  bool control = false;
};
absl::StatusOr<InputRef> ParseInputRef(absl::string_view text);

}  // namespace nereid

#endif  // NEREID_GRAPH_IMPORT_EXPORT_H_
