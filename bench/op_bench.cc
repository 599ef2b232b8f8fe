// Times single ops on Nereid's CPU kernels, forward and forward + backward,
// one thread: the engine side of bench/ops_vs_pytorch.py, which runs PyTorch
// on the same shapes in the same run and prints the ratios.
//
//   bazel run -c opt //bench:op_bench -- [--repeats N] [--only NAME,...]
//
// Each case is a graph  Parameters -> op -> ReduceSum -> loss  differentiated
// by the autodiff pass; "forward" fetches the op's output, "backward" every
// input's gradient (which runs the forward too, as a training step does).
// Prints one JSON line per case: {"case", "forward_ms", "train_ms"} (medians).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "graph/graph_io.h"
#include "ops/model_loader.h"
#include "passes/pass_manager.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

struct Input {
  std::vector<int64_t> dims;
  bool ids = false;     // int32 ids in [0, vocab) fed as an Input, no gradient
  int64_t vocab = 0;
};

struct Case {
  std::string name;
  std::string op;
  std::vector<Input> inputs;
  std::string attrs;  // text of the op node's attr entries
};

std::string Dims(const std::vector<int64_t>& dims) {
  std::string s = "shape {";
  for (int64_t d : dims) absl::StrAppend(&s, " dim: ", d);
  return s + " }";
}

std::string GraphText(const Case& c) {
  std::string text = "attr { key: \"loss\" value { s: \"loss\" } }\n";
  std::vector<std::string> names;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string name = absl::StrCat("p", i);
    names.push_back(absl::StrCat("\"", name, "\""));
    if (c.inputs[i].ids) {
      absl::StrAppend(&text, "node { name: \"", name, "\" op: \"Input\" attr { key: \"shape\" value { ",
                      Dims(c.inputs[i].dims), " } } attr { key: \"dtype\" value { type: DT_INT32 } } }\n");
    } else {
      absl::StrAppend(&text, "node { name: \"", name, "\" op: \"Parameter\" attr { key: \"shape\" value { ",
                      Dims(c.inputs[i].dims), " } } }\n");
    }
  }
  absl::StrAppend(&text, "node { name: \"y\" op: \"", c.op, "\" input: [", absl::StrJoin(names, ", "), "] ", c.attrs,
                  " }\n");
  absl::StrAppend(&text, "node { name: \"loss\" op: \"ReduceSum\" input: \"y\" attr { key: \"keepdims\" value { b: false } } }\n");
  return text;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status RunCase(const Case& c, int repeats) {
  ASSIGN_OR_RETURN(GraphFile file, ParseGraphText(GraphText(c), c.name));
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel(file));
  ASSIGN_OR_RETURN(auto pipeline, ParsePipeline("autodiff"));
  RETURN_IF_ERROR(RunPipeline(*graph, pipeline).status());
  ExecutorOptions options;
  options.threads = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), options));
  std::mt19937 rng(1);
  FeedMap feeds;
  std::vector<std::string> grads;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& in = c.inputs[i];
    const std::string name = absl::StrCat("p", i);
    if (in.ids) {
      ASSIGN_OR_RETURN(Tensor ids, Tensor::Allocate(DT_INT32, in.dims));
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(in.vocab - 1));
      for (int64_t k = 0; k < ids.num_elements(); ++k) ids.data<int32_t>()[k] = pick(rng);
      feeds[name] = ids;
      continue;
    }
    ASSIGN_OR_RETURN(Tensor value, Tensor::Allocate(DT_FLOAT, in.dims));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t k = 0; k < value.num_elements(); ++k) value.data<float>()[k] = u(rng);
    RETURN_IF_ERROR(executor->SetState(name, value));
    grads.push_back(name + "/grad");
  }
  StepInfo step;
  auto time = [&](const std::vector<std::string>& fetches) -> absl::StatusOr<double> {
    std::vector<double> ms;
    for (int r = 0; r < repeats + 2; ++r) {  // two warm-up runs
      auto start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(std::vector<Tensor> out, executor->Evaluate(step, feeds, fetches));
      auto end = std::chrono::steady_clock::now();
      if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    return Median(ms);
  };
  ASSIGN_OR_RETURN(double forward, time({"y"}));
  ASSIGN_OR_RETURN(double train, time(grads));
  std::printf("{\"case\": \"%s\", \"forward_ms\": %.4f, \"train_ms\": %.4f}\n", c.name.c_str(), forward, train);
  std::fflush(stdout);
  return absl::OkStatus();
}

std::string BoolAttr(const char* name) { return absl::StrCat("attr { key: \"", name, "\" value { b: true } }"); }

// Transformer-sized shapes: batch 32, sequence 128, width 256, 4 heads,
// MLP 1024, vocabulary 1000; an LSTM and a GRU layer of width 256 over 128
// steps (the GRU as PyTorch's, linear_before_reset).
std::vector<Case> Cases() {
  return {
      {"layernorm", "LayerNorm", {{{32, 128, 256}}, {{256}}, {{256}}}, ""},
      {"gelu", "Gelu", {{{32, 128, 1024}}}, ""},
      {"batched_matmul", "BatchMatMul", {{{32, 4, 128, 64}}, {{32, 4, 128, 64}}}, BoolAttr("transpose_b")},
      {"attention_softmax", "Softmax", {{{32, 4, 128, 128}}}, ""},
      {"embedding", "Gather", {{{1000, 256}}, {{32, 128}, true, 1000}}, ""},
      {"lstm", "LstmLayer", {{{128, 32, 256}}, {{1024, 256}}, {{1024, 256}}, {{1024}}},
       "attr { key: \"hidden_size\" value { i: 256 } }"},
      {"gru", "GruLayer", {{{128, 32, 256}}, {{768, 256}}, {{768, 256}}, {{1536}}},
       "attr { key: \"hidden_size\" value { i: 256 } } attr { key: \"linear_before_reset\" value { b: true } }"},
  };
}

}  // namespace
}  // namespace nereid

int main(int argc, char** argv) {
  int repeats = 20;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--only" && i + 1 < argc) {
      only = absl::StrSplit(argv[++i], ',', absl::SkipEmpty());
    } else {
      std::fprintf(stderr, "usage: op_bench [--repeats N] [--only NAME,...]\n");
      return 2;
    }
  }
  for (const nereid::Case& c : nereid::Cases()) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.name) == only.end()) continue;
    if (absl::Status s = nereid::RunCase(c, repeats); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}
