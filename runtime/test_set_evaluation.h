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

// The evaluation batch: options.eval_batch, made smaller so that evaluation
// holds no more than a training step does: the training batch's forward
// activations plus one gradient of every parameter (a forward pass keeps
// fewer of its activations alive than a training step keeps for backward),
// so a run's peak memory is training's, and a partitioned plan keeps its
// saving through evaluation; and within the budget above. Never below the
// training batch. Computed from the plan (the source model's activations,
// the gradient of what the least-holding rank's part trains), so every rank
// evaluates the same batches.
int64_t EvaluationBatch(const PlanDef& plan, const TrainOptions& options);

// `batch`: EvaluationBatch's.
absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, int64_t batch, const EvaluationPart& part,
                                           DataShard shard, bool equal_shards, StepInfo info,
                                           DataParallelGroup* group, const FeedLayout& layout);

}  // namespace nereid

#endif  // NEREID_RUNTIME_TEST_SET_EVALUATION_H_
