// nereid infer: a model's forward pass on arrays a user gives, written to an
// .npz: to check an imported model against the framework it came from, or to
// use trained weights. Inference mode (dropout off, batch norm on its
// running statistics); only the nodes the fetched values need run.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/npz_file.h"
#include "core/status_macros.h"
#include "graph/graph_io.h"
#include "ops/model_loader.h"
#include "runtime/cli/checkpoint_weights.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

Flags InferFlags() {
  Flags f("nereid infer MODEL --inputs IN.npz -o OUT.npz [flags]",
          "Runs MODEL forward in inference mode on the arrays of IN.npz and writes the fetched values\n"
          "to OUT.npz (numpy.load reads it). Each array feeds the Input of its name, or the Input\n"
          "whose feed it names (\"images\", \"labels\"); integer arrays feed integer Inputs (token\n"
          "ids). The batch is the arrays' first dimension.");
  f.Value("inputs", "IN.npz", "the arrays to feed (numpy.savez)")
      .Value("o,output", "OUT.npz", "where to write the fetched values, one array per node")
      .Value("fetch", "NODE,...", "the nodes to fetch (default: the graph's logits)")
      .Value("checkpoint", "DIR|FILE", "use the parameters of a checkpoint (the latest in DIR)");
  return f;
}

// The Input node an array feeds: by name, or by its `feed` attribute.
const Node* InputFor(const Graph& graph, const std::string& array) {
  for (const Node* n : graph.nodes()) {
    if (n->op() != "Input") continue;
    auto feed = n->def().attr().find("feed");
    if (n->name() == array || (feed != n->def().attr().end() && feed->second.s() == array)) return n;
  }
  return nullptr;
}

absl::Status Infer(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel(flags.positional()[0]));
  ASSIGN_OR_RETURN(auto arrays, ReadNpz(flags.String("inputs")));
  FeedMap feeds;
  for (auto& [name, tensor] : arrays) {
    const Node* input = InputFor(*graph, name);
    if (input == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(flags.String("inputs"), ": array '", name,
                                                     "' feeds no Input of the model (by name or feed)"));
    }
    if (tensor.dtype() != input->outputs()[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat("array '", name, "' is ", tensor.DebugString(), " but Input '",
                                                     input->name(), "' takes ",
                                                     DataTypeName(input->outputs()[0].dtype)));
    }
    auto feed = input->def().attr().find("feed");
    feeds[feed != input->def().attr().end() ? feed->second.s() : input->name()] = std::move(tensor);
  }
  std::vector<std::string> fetches;
  for (absl::string_view f : absl::StrSplit(flags.String("fetch"), ',', absl::SkipEmpty())) fetches.emplace_back(f);
  if (fetches.empty()) {
    auto logits = graph->header().attr().find("logits");
    if (logits == graph->header().attr().end()) {
      return absl::InvalidArgumentError("the model names no logits (graph attribute 'logits'): give --fetch NODE,...");
    }
    fetches.push_back(logits->second.s());
  }
  for (const std::string& f : fetches) {
    if (graph->FindNode(f) == nullptr) return absl::InvalidArgumentError(absl::StrCat("--fetch: no node '", f, "'"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), ExecutorOptions{}));
  if (flags.Has("checkpoint")) RETURN_IF_ERROR(RestoreParameters(*graph, *executor, flags.String("checkpoint")));
  StepInfo step;
  step.training = false;
  ASSIGN_OR_RETURN(std::vector<Tensor> values, executor->Evaluate(step, feeds, fetches));
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < fetches.size(); ++i) out.emplace_back(fetches[i], std::move(values[i]));
  RETURN_IF_ERROR(WriteNpz(flags.String("output"), out));
  for (const auto& [name, value] : out) std::printf("%s: %s\n", name.c_str(), value.DebugString().c_str());
  return absl::OkStatus();
}

int RunInfer(const std::vector<std::string>& args) {
  Flags flags = InferFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  if (flags.positional().size() != 1 || !flags.Has("inputs") || !flags.Has("output")) {
    std::fprintf(stderr, "error: give one MODEL, --inputs IN.npz and -o OUT.npz (see nereid infer --help)\n");
    return kExitUsage;
  }
  if (absl::Status status = Infer(flags); !status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"infer", "run a model forward on arrays from an .npz", [] { return InferFlags().Help(); },
                                RunInfer});

}  // namespace nereid
