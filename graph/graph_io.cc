#include "graph/graph_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace nereid {
namespace {

class CollectFirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!has_error_) {
      has_error_ = true;
      line_ = line + 1;
      column_ = column + 1;
      message_ = message;
    }
  }
  void AddWarning(int, int, const std::string&) override {}

  bool has_error() const { return has_error_; }
  std::string Format(absl::string_view path) const {
    return absl::StrCat(path, ":", line_, ":", column_, ": parse error: ", message_);
  }

 private:
  bool has_error_ = false;
  int line_ = 0, column_ = 0;
  std::string message_;
};

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int extra;
    if (c < 0x80) {
      extra = 0;
    } else if ((c >> 5) == 0x6) {
      extra = 1;
    } else if ((c >> 4) == 0xE) {
      extra = 2;
    } else if ((c >> 3) == 0x1E) {
      extra = 3;
    } else {
      return false;
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

absl::Status CheckVersion(const GraphDef& def, const std::string& path) {
  if (def.version() < 0 || def.version() > kGraphFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": graph format version ", def.version(),
                                                   " is not supported (this Nereid reads version ",
                                                   kGraphFormatVersion, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

GraphFormat GuessGraphFormat(absl::string_view path, absl::string_view contents) {
  if (absl::EndsWith(path, ".pb") || absl::EndsWith(path, ".bin")) return GraphFormat::kBinary;
  if (absl::EndsWith(path, ".pbtxt") || absl::EndsWith(path, ".prototxt") || absl::EndsWith(path, ".txt")) {
    return GraphFormat::kText;
  }
  if (contents.find('\0') != absl::string_view::npos || !IsValidUtf8(contents)) return GraphFormat::kBinary;
  return GraphFormat::kText;
}

absl::Status ParseTextProto(absl::string_view text, const std::string& path, google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  if (parser.Parse(&input, message)) return absl::OkStatus();
  if (errors.has_error()) return absl::InvalidArgumentError(errors.Format(path));
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid text ", message->GetTypeName()));
}

absl::StatusOr<GraphFile> ParseGraphText(absl::string_view text, std::string path) {
  GraphFile file;
  file.path = std::move(path);
  file.format = GraphFormat::kText;
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::TextFormat::ParseInfoTree locations;
  parser.WriteLocationsTo(&locations);
  google::protobuf::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  if (!parser.Parse(&input, &file.def)) {
    if (errors.has_error()) return absl::InvalidArgumentError(errors.Format(file.path));
    return absl::InvalidArgumentError(absl::StrCat(file.path, ": not a valid text GraphDef"));
  }
  const auto* node_field = GraphDef::descriptor()->FindFieldByName("node");
  file.node_locations.resize(file.def.node_size());
  for (int i = 0; i < file.def.node_size(); ++i) {
    auto loc = locations.GetLocation(node_field, i);
    file.node_locations[i] = {loc.line + 1, loc.column + 1};
  }
  absl::Status version = CheckVersion(file.def, file.path);
  if (!version.ok()) return version;
  return file;
}

absl::StatusOr<GraphFile> ParseGraphBinary(absl::string_view bytes, std::string path) {
  GraphFile file;
  file.path = std::move(path);
  file.format = GraphFormat::kBinary;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !file.def.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path, ": not a valid binary GraphDef (", bytes.size(), " bytes)"));
  }
  absl::Status version = CheckVersion(file.def, file.path);
  if (!version.ok()) return version;
  return file;
}

absl::StatusOr<std::string> ReadGraphFileContents(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open graph file: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size > kMaxGraphFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": graph file is ", st.st_size,
                                                   " bytes; refusing files over ", kMaxGraphFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open graph file"));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return contents;
}

absl::StatusOr<GraphFile> ReadGraphFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadGraphFileContents(path);
  if (!contents.ok()) return contents.status();
  if (GuessGraphFormat(path, *contents) == GraphFormat::kBinary) return ParseGraphBinary(*contents, path);
  return ParseGraphText(*contents, path);
}

std::string GraphDefToText(const GraphDef& def) {
  std::string out;
  google::protobuf::TextFormat::Printer printer;
  printer.PrintToString(def, &out);
  return out;
}

absl::Status WriteGraphFile(const GraphDef& def, const std::string& path, GraphFormat format) {
  std::string contents;
  if (format == GraphFormat::kText) {
    contents = GraphDefToText(def);
  } else if (!def.SerializeToString(&contents)) {
    return absl::InternalError(absl::StrCat(path, ": cannot serialise the graph"));
  }
  return WriteFileAtomically(path, contents);
}

}  // namespace nereid
