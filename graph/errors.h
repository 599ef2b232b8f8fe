#ifndef NEREID_GRAPH_ERRORS_H_
#define NEREID_GRAPH_ERRORS_H_

// Errors about a node read "FILE:LINE:COL: node 'NAME' (OP): what is wrong",
// so a person can jump to the node in the graph file.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/ir.h"

namespace nereid {

// "models/x.pbtxt:12:3: node 'fc1' (MatMul)"; parts that are unknown are left
// out (no file for a graph built in memory, no line for a binary file).
std::string DescribeNode(absl::string_view path, SourceLocation location, absl::string_view name,
                         absl::string_view op);
std::string DescribeNode(const Graph& graph, const Node& node);

// An InvalidArgument error (or `code`) prefixed with DescribeNode.
absl::Status NodeError(const Graph& graph, const Node& node, absl::string_view message,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument);

}  // namespace nereid

#endif  // NEREID_GRAPH_ERRORS_H_
