// nereid import: an ONNX model -> a Nereid graph file that trains as written
// (graph/onnx/onnx_import.h). The result is loaded and checked before it is
// written, so a file that lands on disk also passes `nereid check`.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph_io.h"
#include "graph/onnx/onnx_converter.h"
#include "graph/onnx/onnx_import.h"
#include "ops/model_loader.h"
#include "ops/model_summary.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"

namespace nereid {
namespace {

Flags ImportFlags() {
  Flags f("nereid import MODEL.onnx -o OUT.pbtxt [flags]",
          "Converts an ONNX model into a Nereid graph: initializers become Parameters holding their\n"
          "values, the one data input the Input the dataset's images feed (batch dimension -1), the\n"
          "output the logits; a labels Input and the loss are added. An .onnx file can also be given\n"
          "directly wherever a model is (nereid run, check, plan), with the defaults below.");
  f.Value("o,output", "PATH", "where to write (.pbtxt text, .pb binary)")
      .Value("dataset", "NAME", "the graph's dataset attribute (default fashion-mnist)")
      .Value("loss", "OP", "SoftmaxCrossEntropy (default), HingeLoss or LogisticLoss")
      .Switch("forward-only", "every input an Input of its exact shape, no loss (inference)")
      .Epilogue(absl::StrCat("ONNX ops converted: ", absl::StrJoin(OnnxConverterRegistry::Global().OpTypes(), ", "),
                             ".\nAnything else, or an attribute Nereid cannot honour, is an error naming the node.\n"));
  return f;
}

int Import(const std::vector<std::string>& args) {
  Flags flags = ImportFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  if (flags.positional().size() != 1 || !flags.Has("output")) {
    std::fprintf(stderr, "error: give one .onnx model and -o OUT (see nereid import --help)\n");
    return kExitUsage;
  }
  const std::string model = flags.positional()[0];
  const std::string out = flags.String("output");
  OnnxImportOptions options;
  options.forward_only = flags.Has("forward-only");
  options.dataset = options.forward_only ? "" : flags.String("dataset", "fashion-mnist");
  options.loss = flags.String("loss", "SoftmaxCrossEntropy");
  if (options.loss != "SoftmaxCrossEntropy" && options.loss != "HingeLoss" && options.loss != "LogisticLoss") {
    std::fprintf(stderr, "error: --loss %s: expected SoftmaxCrossEntropy, HingeLoss or LogisticLoss\n",
                 options.loss.c_str());
    return kExitUsage;
  }
  absl::StatusOr<GraphDef> def = ImportOnnxFile(model, options);
  if (!def.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(def.status().message()).c_str());
    return kExitFailure;
  }
  GraphFile file{model, GraphFormat::kBinary, *def, {}};
  absl::StatusOr<std::unique_ptr<Graph>> graph = LoadModel(file);
  if (!graph.ok()) {
    std::fprintf(stderr, "error: the imported graph does not load: %s\n", std::string(graph.status().message()).c_str());
    return kExitFailure;
  }
  const GraphFormat format = absl::EndsWith(out, ".pb") ? GraphFormat::kBinary : GraphFormat::kText;
  if (absl::Status written = WriteGraphFile(*def, out, format); !written.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(written.message()).c_str());
    return kExitFailure;
  }
  ModelSummary summary = SummarizeModel(**graph);
  std::printf("%s: %d Nereid nodes, %lld parameters; written to %s\n", model.c_str(), def->node_size(),
              static_cast<long long>(summary.trainable_parameters), out.c_str());
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"import", "convert an ONNX model into a Nereid graph", [] { return ImportFlags().Help(); }, Import});

}  // namespace nereid
