// Golden plans: a small model's graph after each pass of a pipeline, checked
// in under tests/golden/CASE/ and compared as text. A pass that changes what
// it emits changes a file here, so the change is seen in review.
//
// After an intended change, rewrite the files and review the diff:
//   bazel run //tests:golden_plans_test -- --update

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file_io.h"
#include "gtest/gtest.h"
#include "graph/graph_io.h"
#include "graph/import_export.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"

namespace nereid {
namespace {

bool update = false;

struct GoldenCase {
  std::string name;
  std::string model;
  std::string passes;
  int workers;
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

const std::vector<GoldenCase>& Cases() {
  static const std::vector<GoldenCase> cases = {
      // Synchronous data parallelism with fp16 on the wire, pipelined, look-ahead.
      {"logreg_pipelined", "models/logreg_fashion.pbtxt",
       "autodiff,compress(method=fp16),pipeline(width=2),sgd(lr=0.05,momentum=0.9),lookahead", 2},
      // A gradient codec and Adam.
      {"logreg_qsgd_adam", "models/logreg_fashion.pbtxt", "autodiff,compress(method=qsgd,bits=4),adam(lr=0.001)",
       2},
      // SplitBrain on 4 workers in groups of 2: shards, group collectives and
      // their conjugates, the shards' gradients averaged over their replicas.
      {"mlp_hybrid", "models/mlp_fashion.pbtxt", "hybrid_partition(group_size=2),autodiff,sgd(lr=0.05,momentum=0.9)",
       4},
      // Model parallelism by layers on 2 workers: placement, the forward
      // Send/Recv pair, and the backward pair autodiff derives.
      {"mlp_stage_split", "models/mlp_fashion.pbtxt", "stage_split(at=fc2),autodiff,sgd(lr=0.05)", 2},
      // A parameter server for 2 workers: parameters, momentum and updates on
      // rank 2, the workers' role, chunked pulls and pushes.
      {"logreg_parameter_server", "models/logreg_fashion.pbtxt",
       "autodiff,sgd(lr=0.05,momentum=0.9),parameter_server(servers=1,chunk_kb=16)", 3},
  };
  return cases;
}

// tests/golden/CASE/NN_PASS.pbtxt, under the workspace when updating.
std::string GoldenPath(const GoldenCase& c, int index, const std::string& pass) {
  std::string relative = absl::StrFormat("tests/golden/%s/%02d_%s.pbtxt", c.name, index + 1, pass);
  if (!update) return relative;
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return workspace == nullptr ? relative : absl::StrCat(workspace, "/", relative);
}

std::string ReadOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class GoldenPlansTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenPlansTest, EveryPassEmitsItsGoldenPlan) {
  const GoldenCase& c = GetParam();
  auto graph = LoadModel(c.model);
  ASSERT_TRUE(graph.ok()) << graph.status();
  // As `nereid plan --workers N` records it for the passes that partition.
  (*graph)->mutable_header()->mutable_records()->set_workers(c.workers);
  auto pipeline = ParsePipeline(c.passes);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(AddImpliedPasses(*pipeline, PlanTarget{c.workers}).ok());
  PipelineOptions options;
  int index = 0;
  for (const PipelineStage& stage : *pipeline) options.dump_after.push_back(stage.pass->name);
  std::vector<std::string> compared;
  options.dump = [&](const std::string& pass, const Graph& g) -> absl::Status {
    std::string text = GraphDefToText(ExportGraph(g));
    std::string path = GoldenPath(c, index++, pass);
    if (update) {
      std::fprintf(stderr, "writing %s\n", path.c_str());
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      return WriteFileAtomically(path, text);
    }
    std::string golden = ReadOrEmpty(path);
    EXPECT_FALSE(golden.empty()) << path << " is missing: run `bazel run //tests:golden_plans_test -- --update`";
    // Text protos: a line diff is what a reviewer reads; gtest shows the first lines that differ.
    EXPECT_EQ(text, golden) << "the plan after '" << pass << "' differs from " << path;
    compared.push_back(path);
    return absl::OkStatus();
  };
  auto reports = RunPipeline(**graph, *pipeline, options);
  ASSERT_TRUE(reports.ok()) << reports.status();
  if (!update) {
    EXPECT_EQ(compared.size(), pipeline->size());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenPlansTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace nereid

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--update") nereid::update = true;
  }
  return RUN_ALL_TESTS();
}
