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

absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, const EvaluationPart& part,
                                           DataShard shard, bool equal_shards, StepInfo info,
                                           DataParallelGroup* group, const FeedLayout& layout);

}  // namespace nereid

#endif  // NEREID_RUNTIME_TEST_SET_EVALUATION_H_
