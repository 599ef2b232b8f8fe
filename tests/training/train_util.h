#ifndef NEREID_TESTS_TRAINING_TRAIN_UTIL_H_
#define NEREID_TESTS_TRAINING_TRAIN_UTIL_H_

// Helpers of the device tests (the sim's and the GPU's): a model of models/
// trained step by step through the executor, overlapping steps as its plan
// allows, with what the run leaves (losses, parameters, device counters).

#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "schedulers/executor.h"
#include "tests/training/plan_util.h"

namespace nereid {
namespace testing {

// What a run leaves: the loss of each step and the parameters at the end.
struct Trained {
  std::vector<float> losses;
  std::vector<std::pair<std::string, Tensor>> state;
  DeviceStreamsStats device;
  absl::Status status;
};

// Random [batch, 128] byte windows and next-byte targets (char_transformer's feeds).
inline std::vector<FeedMap> RandomTextFeeds(unsigned seed, int steps, int batch) {
  std::mt19937 rng(seed);
  std::vector<FeedMap> feeds(steps);
  for (FeedMap& f : feeds) {
    Tensor tokens = *Tensor::Allocate(DT_INT64, {batch, 128});
    Tensor targets = *Tensor::Allocate(DT_INT32, {batch, 128});
    for (int i = 0; i < batch * 128; ++i) {
      tokens.data<int64_t>()[i] = static_cast<int64_t>(rng() % 256);
      targets.data<int32_t>()[i] = static_cast<int32_t>(rng() % 256);
    }
    f["images"] = tokens;
    f["labels"] = targets;
  }
  return feeds;
}

inline std::vector<FeedMap> FeedsFor(const std::string& model, int steps, int batch) {
  if (model == "char_transformer") return RandomTextFeeds(7, steps, batch);
  if (model.find("cifar") != std::string::npos) return RandomImageFeeds(7, steps, batch, {3, 32, 32});
  return RandomImageFeeds(7, steps, batch);
}

inline bool UnderThreadSanitizer() {
  const char* sanitizer = std::getenv("NEREID_SANITIZER");
  return sanitizer != nullptr && std::string(sanitizer) == "thread";
}

// Under ThreadSanitizer one thread: a kernel's oneTBB loop, started from a
// sim stream's thread, hands work over through oneTBB's uninstrumented
// synchronisation, and the stream's thread exits with the executor, so its
// stack (which the loop read) is reused by the next executor's threads and
// TSan reports that reuse as a race. With one thread no kernel starts a loop.
inline int Threads() { return UnderThreadSanitizer() ? 1 : 2; }

// Trains `model` planned with `passes` on `feeds`, overlapping steps as the
// plan allows (StartStep of t+1 before FinishStep of t). `collectives`: the
// worker's collective engine (null: a world of one without one).
inline Trained Train(const std::string& model, const std::string& passes, const std::vector<FeedMap>& feeds,
                     const std::string& skip_waits_of = "", CollectiveEngine* collectives = nullptr) {
  Trained out;
  auto graph = testing::PlanModel(model, passes);
  if (!graph.ok()) {
    out.status = graph.status();
    return out;
  }
  ExecutorOptions options;
  options.threads = Threads();
  options.skip_device_waits_of = skip_waits_of;
  options.collectives = collectives;
  auto executor = Executor::Create(graph->get(), options);
  if (!executor.ok()) {
    out.status = executor.status();
    return out;
  }
  const int steps = static_cast<int>(feeds.size());
  for (int t = 0; t < steps && out.status.ok(); ++t) {
    const StepInfo step{0, t, t, steps, 1, true};
    out.status = (*executor)->StartStep(step, feeds[t], {"loss"});
    if (!out.status.ok()) break;
    if (t > 0) {
      auto loss = (*executor)->FinishStep(t - 1);
      if (!loss.ok()) {
        out.status = loss.status();
        break;
      }
      out.losses.push_back((*loss)[0].data<float>()[0]);
    }
  }
  if (out.status.ok()) {
    auto loss = (*executor)->FinishStep(steps - 1);
    out.status = loss.status();
    if (loss.ok()) out.losses.push_back((*loss)[0].data<float>()[0]);
  }
  out.state = (*executor)->State();
  if ((*executor)->device() != nullptr) out.device = (*executor)->device()->stats();
  return out;
}

}  // namespace testing
}  // namespace nereid

#endif  // NEREID_TESTS_TRAINING_TRAIN_UTIL_H_
