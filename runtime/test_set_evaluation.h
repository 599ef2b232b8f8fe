#ifndef NEREID_RUNTIME_TEST_SET_EVALUATION_H_
#define NEREID_RUNTIME_TEST_SET_EVALUATION_H_

// Scoring the test set after an epoch: each rank its shard, the counts summed
// over the ranks, so every rank reports the whole test set's figures.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/datasets.h"
#include "runtime/batch_feeds.h"
#include "runtime/data_parallel_group.h"
#include "runtime/data_shard.h"
#include "runtime/trainer.h"
#include "schedulers/executor.h"

namespace nereid {

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// What this rank's part of the plan computes in evaluation: the scores
// (logits and loss; empty where another rank holds them), and the Sends that
// feed another rank's scores.
struct EvaluationPart {
  std::string logits, loss;
  std::vector<std::string> sends;
};

// Forward activations one evaluation batch may hold on a rank.
inline constexpr int64_t kEvaluationActivationBudget = int64_t{4} << 30;

// The evaluation batch: options.eval_batch, made smaller when the model's
// forward activations at that batch would exceed the budget (a language
// model's [B, T, ...] activations: 22 MiB a window for char_transformer,
// which at 1,000 windows ran two ranks out of memory), but not below the
// training batch. Computed from the plan's source model, so every rank
// (whatever its part) evaluates the same batches.
int64_t EvaluationBatch(const PlanDef& plan, const TrainOptions& options);

// `batch`: EvaluationBatch's.
absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, int64_t batch, const EvaluationPart& part,
                                           DataShard shard, bool equal_shards, StepInfo info,
                                           DataParallelGroup* group, const FeedLayout& layout);

}  // namespace nereid

#endif  // NEREID_RUNTIME_TEST_SET_EVALUATION_H_
