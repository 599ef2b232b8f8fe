// nereid run: trains a model (or a plan) and evaluates it every epoch.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "runtime/trainer.h"

namespace nereid {
namespace {

constexpr char kHelp[] =
    "Usage: nereid run MODEL_OR_PLAN [flags]\n\n"
    "Trains on the model's dataset and evaluates on its test set after every epoch.\n\n"
    "  --passes P          pass pipeline for a model (default autodiff,sgd(lr=0.01,momentum=0.9));\n"
    "                      ignored for a plan written by `nereid plan`\n"
    "  --workers N         worker processes (only 1 is built yet)\n"
    "  --threads T         cores per worker, every library included (default 1)\n"
    "  --epochs N          (default 1)\n"
    "  --batch B           batch size per worker (default 64)\n"
    "  --seed S            data shuffling seed (default 0)\n"
    "  --dataset NAME      override the model's dataset: fashion-mnist, cifar10, synthetic\n"
    "  --data-dir DIR      where the dataset's files are\n"
    "  --train-limit N     use the first N training examples (0: all)\n"
    "  --test-limit N      use the first N test examples (0: all)\n"
    "  --max-steps N       stop after N steps (benchmarks)\n"
    "  --metrics-json PATH write the run's metrics as JSON\n"
    "  --checkpoint DIR    save parameters and optimizer state after every epoch\n"
    "  --resume            continue from the last complete checkpoint in DIR\n"
    "  --quiet             no progress output\n";

int Run(const std::vector<std::string>& args) {
  Flags flags({"passes", "workers", "threads", "epochs", "batch", "seed", "dataset", "data-dir", "train-limit",
               "test-limit", "max-steps", "metrics-json", "checkpoint"},
              {"resume", "quiet", "help"});
  absl::Status parsed = flags.Parse(args);
  if (!parsed.ok() || flags.Has("help") || flags.positional().size() != 1) {
    if (!parsed.ok()) std::fprintf(stderr, "error: %s\n\n", std::string(parsed.message()).c_str());
    std::fputs(kHelp, flags.Has("help") ? stdout : stderr);
    return flags.Has("help") && parsed.ok() ? kExitOk : kExitUsage;
  }
  TrainOptions o;
  o.model_path = flags.positional()[0];
  o.passes = flags.String("passes", o.passes);
  o.dataset = flags.String("dataset");
  o.data_dir = flags.String("data-dir");
  o.metrics_json = flags.String("metrics-json");
  o.checkpoint_dir = flags.String("checkpoint");
  o.resume = flags.Has("resume");
  if (flags.Has("quiet")) o.progress = nullptr;
  struct IntFlag {
    const char* name;
    int64_t* target;
  };
  int64_t workers = 1, threads = 1, seed = 0;
  for (IntFlag f : {IntFlag{"workers", &workers}, IntFlag{"threads", &threads}, IntFlag{"epochs", &o.epochs},
                    IntFlag{"batch", &o.batch}, IntFlag{"seed", &seed}, IntFlag{"train-limit", &o.train_limit},
                    IntFlag{"test-limit", &o.test_limit}, IntFlag{"max-steps", &o.max_steps}}) {
    absl::StatusOr<int64_t> v = flags.Int(f.name, *f.target);
    if (!v.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(v.status().message()).c_str());
      return kExitUsage;
    }
    *f.target = *v;
  }
  o.workers = static_cast<int>(workers);
  o.threads = static_cast<int>(threads);
  o.seed = static_cast<uint64_t>(seed);
  absl::StatusOr<TrainResult> result = Train(o);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return kExitFailure;
  }
  std::printf("%s: %lld epochs, %lld steps, final train loss %.4f, test accuracy %.2f%%, %.0f samples/s, "
              "%.1f s, peak RSS %.1f MiB, peak tensors %.1f MiB\n",
              o.model_path.c_str(), static_cast<long long>(result->epochs), static_cast<long long>(result->steps),
              result->final_train_loss, 100 * result->final_test_accuracy, result->samples_per_second,
              result->wall_seconds, result->peak_rss_bytes / 1048576.0, result->peak_tensor_bytes / 1048576.0);
  return kExitOk;
}

}  // namespace

const Command& RunCommand() {
  static const Command command{"run", "train a model and evaluate it every epoch", kHelp, Run};
  return command;
}

}  // namespace nereid
