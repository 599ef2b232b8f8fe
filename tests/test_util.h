#ifndef NEREID_TESTS_TEST_UTIL_H_
#define NEREID_TESTS_TEST_UTIL_H_

// Helpers for tests that write small graphs as protobuf text inline.
//
//   std::string g = InputNode("x", {-1, 784}) + ParamNode("w", {784, 10}) +
//                   OpNode("y", "MatMul", {"x", "w"});
//   auto graph = LoadText(g);

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph_io.h"
#include "graph/ir.h"
#include "ops/model_loader.h"

namespace nereid {
namespace testing {

inline constexpr char kTestPath[] = "test.pbtxt";

inline std::string Attr(const std::string& key, const std::string& value) {
  return absl::StrCat("  attr { key: \"", key, "\" value { ", value, " } }\n");
}

inline std::string ShapeValue(const std::vector<int64_t>& dims) {
  std::string s = "shape { ";
  for (int64_t d : dims) absl::StrAppend(&s, "dim: ", d, " ");
  return s + "}";
}

inline std::string IntsValue(const std::vector<int64_t>& v) {
  std::string s = "list { ";
  for (int64_t x : v) absl::StrAppend(&s, "i: ", x, " ");
  return s + "}";
}

inline std::string OpNode(const std::string& name, const std::string& op, const std::vector<std::string>& inputs = {},
                          const std::string& attrs = "") {
  std::string s = absl::StrCat("node {\n  name: \"", name, "\"\n  op: \"", op, "\"\n");
  for (const std::string& in : inputs) absl::StrAppend(&s, "  input: \"", in, "\"\n");
  return s + attrs + "}\n";
}

inline std::string InputNode(const std::string& name, const std::vector<int64_t>& dims,
                             const std::string& dtype = "DT_FLOAT") {
  return OpNode(name, "Input", {}, Attr("shape", ShapeValue(dims)) + Attr("dtype", "type: " + dtype));
}

inline std::string ParamNode(const std::string& name, const std::vector<int64_t>& dims) {
  return OpNode(name, "Parameter", {}, Attr("shape", ShapeValue(dims)));
}

inline absl::StatusOr<std::unique_ptr<Graph>> LoadText(const std::string& text) {
  absl::StatusOr<GraphFile> file = ParseGraphText(text, kTestPath);
  if (!file.ok()) return file.status();
  return LoadModel(*file);
}

// The error message of loading `text`, or "OK".
inline std::string LoadError(const std::string& text) {
  auto graph = LoadText(text);
  return graph.ok() ? "OK" : std::string(graph.status().message());
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_TEST_UTIL_H_
