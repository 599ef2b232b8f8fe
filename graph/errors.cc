#include "graph/errors.h"

#include "absl/strings/str_cat.h"

namespace nereid {

std::string DescribeNode(absl::string_view path, SourceLocation location, absl::string_view name,
                         absl::string_view op) {
  std::string out;
  if (!path.empty()) {
    absl::StrAppend(&out, path);
    if (location.line > 0) absl::StrAppend(&out, ":", location.line, ":", location.column);
    absl::StrAppend(&out, ": ");
  }
  absl::StrAppend(&out, "node '", name, "'");
  if (!op.empty()) absl::StrAppend(&out, " (", op, ")");
  return out;
}

std::string DescribeNode(const Graph& graph, const Node& node) {
  return DescribeNode(graph.source_path(), node.location(), node.name(), node.op());
}

absl::Status NodeError(const Graph& graph, const Node& node, absl::string_view message,
                       absl::StatusCode code) {
  return absl::Status(code, absl::StrCat(DescribeNode(graph, node), ": ", message));
}

}  // namespace nereid
