#ifndef NEREID_GRAPH_GRAPH_IO_H_
#define NEREID_GRAPH_GRAPH_IO_H_

// Reading and writing graph files, as protobuf text (*.pbtxt) or binary
// (*.pb). The text reader records where each node starts so later errors can
// name the line and column. Files larger than kMaxGraphFileBytes are refused
// before they are read.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"

namespace nereid {

inline constexpr int kGraphFormatVersion = 1;
inline constexpr int64_t kMaxGraphFileBytes = int64_t{1} << 30;

enum class GraphFormat { kText, kBinary };

struct GraphFile {
  std::string path;
  GraphFormat format = GraphFormat::kText;
  GraphDef def;
  // Where node i of `def` starts (text files only; empty for binary).
  std::vector<SourceLocation> node_locations;
};

// By extension: .pb/.bin binary, .pbtxt/.prototxt/.txt text; otherwise by
// content (NUL bytes or invalid UTF-8 mean binary).
GraphFormat GuessGraphFormat(absl::string_view path, absl::string_view contents);

absl::StatusOr<GraphFile> ReadGraphFile(const std::string& path);
// The file's bytes, refused when it is not a regular file or is over
// kMaxGraphFileBytes (graph and plan files alike).
absl::StatusOr<std::string> ReadGraphFileContents(const std::string& path);
// Parse from memory; `path` only labels errors.
absl::StatusOr<GraphFile> ParseGraphText(absl::string_view text, std::string path);
// Parses `text` as the text form of `message` (a RunConfig, say); an error
// names path:line:column.
absl::Status ParseTextProto(absl::string_view text, const std::string& path, google::protobuf::Message* message);
absl::StatusOr<GraphFile> ParseGraphBinary(absl::string_view bytes, std::string path);

std::string GraphDefToText(const GraphDef& def);
// Writes atomically (core/file_io.h).
absl::Status WriteGraphFile(const GraphDef& def, const std::string& path, GraphFormat format);

}  // namespace nereid

#endif  // NEREID_GRAPH_GRAPH_IO_H_
