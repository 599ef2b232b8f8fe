// nereid generate: text from a trained byte-level language model (a model
// whose images Input is [-1, T] byte ids and whose logits are [B, T, 256],
// such as models/char_transformer.pbtxt trained on a text dataset). Each new
// byte is one forward pass over the last T bytes: the prompt sits at the
// start of the window until it fills, and the logits at the last real
// position give the next byte, greedily (--temperature 0) or sampled from
// softmax(logits / temperature) with a seeded generator. The model must be
// causal (a position's logits may not read later positions); the padding
// after the last real position is then never seen.

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ops/model_loader.h"
#include "runtime/cli/checkpoint_weights.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

constexpr int64_t kMaxTokens = 1 << 20;

Flags GenerateFlags() {
  Flags f("nereid generate CHECKPOINT --model MODEL --prompt TEXT [flags]",
          "Continues TEXT with a trained byte-level language model (ids [-1, T] in, logits\n"
          "[B, T, 256] out): one forward pass per new byte over the last T bytes. CHECKPOINT is a\n"
          "checkpoint directory (its latest) or a .ckpt file of `nereid run --checkpoint`.");
  f.Value("model", "MODEL", "the model the checkpoint was trained with")
      .Value("prompt", "TEXT", "the text to continue (at least one byte)")
      .Value("tokens", "N", "bytes to generate (default 200)")
      .Value("temperature", "T", "0: the most likely byte each time; > 0: sample from softmax(logits / T) "
                                 "(default 0.8)")
      .Value("seed", "S", "the sampler's seed (default 0)");
  return f;
}

// The model's byte-id Input and its window length T.
absl::StatusOr<std::pair<const Node*, int64_t>> WindowInput(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    auto feed = n->def().attr().find("feed");
    if (n->op() != "Input" || feed == n->def().attr().end() || feed->second.s() != "images") continue;
    const ShapeAndType& out = n->outputs()[0];
    if (out.shape.rank() != 2 || out.shape.dim(1) < 1 || (out.dtype != DT_INT32 && out.dtype != DT_INT64)) {
      break;
    }
    return std::make_pair(n, out.shape.dim(1));
  }
  return absl::InvalidArgumentError(
      "the model is not a byte-level language model: its images Input must be int32/int64 [-1, T]");
}

absl::Status Generate(const Flags& flags) {
  const std::string prompt = flags.String("prompt");
  if (prompt.empty()) return absl::InvalidArgumentError("--prompt must hold at least one byte");
  ASSIGN_OR_RETURN(int64_t tokens, flags.Int("tokens", 200));
  ASSIGN_OR_RETURN(int64_t seed, flags.Int("seed", 0));
  double temperature = 0.8;
  if (flags.Has("temperature") && !absl::SimpleAtod(flags.String("temperature"), &temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("--temperature ", flags.String("temperature"), " is not a number"));
  }
  if (tokens < 0 || tokens > kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--tokens must be in [0, ", kMaxTokens, "]"));
  }
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError("--temperature must be a finite number >= 0");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel(flags.String("model")));
  ASSIGN_OR_RETURN(auto window_input, WindowInput(*graph));
  const auto [input, window] = window_input;
  auto logits_attr = graph->header().attr().find("logits");
  if (logits_attr == graph->header().attr().end()) {
    return absl::InvalidArgumentError("the model names no logits (graph attribute 'logits')");
  }
  const std::string logits_name = logits_attr->second.s();
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), ExecutorOptions{}));
  RETURN_IF_ERROR(RestoreParameters(*graph, *executor, flags.positional()[0]));

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::string text = prompt;
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  StepInfo step;
  step.training = false;
  for (int64_t i = 0; i < tokens; ++i) {
    // The last `window` bytes, left-aligned; padding after them is never read.
    const int64_t used = std::min<int64_t>(window, static_cast<int64_t>(text.size()));
    const size_t begin = text.size() - static_cast<size_t>(used);
    ASSIGN_OR_RETURN(Tensor ids, Tensor::Zeros(input->outputs()[0].dtype, {1, window}));
    for (int64_t p = 0; p < used; ++p) {
      const int64_t byte = static_cast<unsigned char>(text[begin + p]);
      if (ids.dtype() == DT_INT64) {
        ids.data<int64_t>()[p] = byte;
      } else {
        ids.data<int32_t>()[p] = static_cast<int32_t>(byte);
      }
    }
    ASSIGN_OR_RETURN(std::vector<Tensor> out, executor->Evaluate(step, {{"images", ids}}, {logits_name}));
    const Tensor& logits = out[0];
    if (logits.rank() != 3 || logits.dim(1) != window) {
      return absl::InvalidArgumentError(absl::StrCat("logits '", logits_name, "' are ", logits.DebugString(),
                                                     "; a language model's are [1, ", window, ", vocabulary]"));
    }
    const int64_t vocabulary = logits.dim(2);
    const float* row = logits.data<float>() + (used - 1) * vocabulary;
    int64_t next = std::max_element(row, row + vocabulary) - row;
    if (temperature > 0) {
      std::vector<double> weights(vocabulary);
      for (int64_t v = 0; v < vocabulary; ++v) weights[v] = std::exp((row[v] - row[next]) / temperature);
      next = std::discrete_distribution<int64_t>(weights.begin(), weights.end())(rng);
    }
    if (next > 255) return absl::InvalidArgumentError(absl::StrCat("the model chose id ", next, ", not a byte"));
    const char byte = static_cast<char>(next);
    text.push_back(byte);
    std::fputc(byte, stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return absl::OkStatus();
}

int RunGenerate(const std::vector<std::string>& args) {
  Flags flags = GenerateFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  if (flags.positional().size() != 1 || !flags.Has("model") || !flags.Has("prompt")) {
    std::fprintf(stderr, "error: give one CHECKPOINT, --model MODEL and --prompt TEXT (see nereid generate --help)\n");
    return kExitUsage;
  }
  if (absl::Status status = Generate(flags); !status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"generate", "continue a text with a trained byte-level language model",
                                [] { return GenerateFlags().Help(); }, RunGenerate});

}  // namespace nereid
