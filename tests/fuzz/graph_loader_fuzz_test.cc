// A GoogleTest-driven random mutator for the graph loader. It mutates the
// model files (as text and as binary) and checks that loading never crashes,
// hangs or allocates without bound: every input either loads or yields a
// non-empty error. Loaded graphs must also survive export and re-import.
//
// Runs briefly in the test suite; for a longer run:
//   NEREID_FUZZ_ITERATIONS=200000 bazel test //tests:graph_loader_fuzz_test
// (under --config=asan to catch memory errors too).

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "graph/import_export.h"
#include "gtest/gtest.h"
#include "ops/model_loader.h"
#include "tests/fuzz/mutator.h"

namespace nereid {
namespace {

const char* const kSeeds[] = {"models/mlp_fashion.pbtxt", "models/lenet_fashion.pbtxt", "models/resnet20_cifar.pbtxt",
                              "models/svm_fashion.pbtxt"};

// Fragments that steer mutations toward interesting structure.
const char* const kDictionary[] = {
    "node {",        "}",           "{",         "input: \"images\"", "input: \"^loss\"", "input: \"fc1/matmul:7\"",
    "dim: -1",       "dim: -7",     "dim: 0",    "dim: 4294967296",   "dim: 9223372036854775807",
    "op: \"Conv2D\"", "op: \"Feedback\"", "op: \"Concat\"", "name: \"images\"", "i: -1", "f: nan", "s: \"SAME\"",
    "version: 99",   "i: 9223372036854775807", "i: 0",   "loop { name: \"l\" }", "attr { key: \"shape\" value { shape { dim: 3 } } }",
    "attr { key: \"pads\" value { list { i: 1 i: 2 } } }", "float_val: 1", "raw_data: \"\\000\"", "\"", "\\",
};

int Iterations() { return testing::FuzzIterations(400); }

std::string Mutate(const std::string& s, std::mt19937_64& rng) {
  static const std::vector<std::string> dictionary = [] {
    std::vector<std::string> d;
    for (const char* fragment : kDictionary) d.push_back(std::string(" ") + fragment + " ");
    return d;
  }();
  return testing::Mutate(s, rng, dictionary);
}

void CheckOne(const std::string& input, bool binary, int* loaded) {
  absl::StatusOr<GraphFile> file = binary ? ParseGraphBinary(input, "fuzz.pb") : ParseGraphText(input, "fuzz.pbtxt");
  if (!file.ok()) {
    ASSERT_FALSE(file.status().message().empty());
    return;
  }
  auto graph = LoadModel(*file);
  if (!graph.ok()) {
    ASSERT_FALSE(graph.status().message().empty());
    return;
  }
  ++*loaded;
  // A graph that loads exports to a GraphDef that loads again.
  GraphFile again;
  again.def = ExportGraph(**graph);
  auto reloaded = LoadModel(again);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ASSERT_EQ((*reloaded)->num_nodes(), (*graph)->num_nodes());
}

TEST(GraphLoaderFuzzTest, MutatedTextNeverCrashes) {
  std::mt19937_64 rng(20261121);
  int loaded = 0, total = 0;
  for (const char* path : kSeeds) {
    auto seed = ReadGraphFile(path);
    ASSERT_TRUE(seed.ok()) << seed.status();
    std::string text = GraphDefToText(seed->def);
    for (int i = 0; i < Iterations(); ++i, ++total) {
      ASSERT_NO_FATAL_FAILURE(CheckOne(Mutate(text, rng), /*binary=*/false, &loaded));
    }
  }
  // Some mutations (whitespace, duplicated attrs) leave a valid model; if none
  // did, the mutator is only exercising the parser.
  EXPECT_GT(loaded, 0) << "of " << total;
  EXPECT_LT(loaded, total);
}

TEST(GraphLoaderFuzzTest, MutatedBinaryNeverCrashes) {
  std::mt19937_64 rng(7);
  int loaded = 0;
  for (const char* path : kSeeds) {
    auto seed = ReadGraphFile(path);
    ASSERT_TRUE(seed.ok()) << seed.status();
    std::string bytes;
    ASSERT_TRUE(seed->def.SerializeToString(&bytes));
    for (int i = 0; i < Iterations(); ++i) {
      ASSERT_NO_FATAL_FAILURE(CheckOne(Mutate(bytes, rng), /*binary=*/true, &loaded));
    }
  }
}

}  // namespace
}  // namespace nereid
