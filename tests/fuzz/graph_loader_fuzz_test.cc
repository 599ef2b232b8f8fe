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

int Iterations() {
  const char* env = std::getenv("NEREID_FUZZ_ITERATIONS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 400;
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    size_t n = s.size();
    size_t pos = n == 0 ? 0 : rng() % n;
    size_t len = n == 0 ? 0 : 1 + rng() % std::min<size_t>(64, n - pos);
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (n > 0) s[pos] = static_cast<char>(rng());
        break;
      case 1:  // delete a range
        s.erase(pos, len);
        break;
      case 2:  // duplicate a range
        s.insert(pos, s.substr(pos, len));
        break;
      case 3: {  // insert a dictionary fragment
        const char* frag = kDictionary[rng() % (sizeof(kDictionary) / sizeof(kDictionary[0]))];
        s.insert(pos, std::string(" ") + frag + " ");
        break;
      }
      case 4: {  // replace a number with an extreme one
        size_t digit = s.find_first_of("0123456789", pos);
        if (digit != std::string::npos) s.replace(digit, 1, rng() % 2 ? "99999999999" : "-2");
        break;
      }
      case 5: {  // move a line elsewhere
        size_t end = s.find('\n', pos);
        if (end == std::string::npos) break;
        std::string line = s.substr(pos, end - pos + 1);
        s.erase(pos, line.size());
        s.insert(s.empty() ? 0 : rng() % s.size(), line);
        break;
      }
    }
  }
  return s;
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
