#include "runtime/test_set_evaluation.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/batch_loader.h"
#include "ops/model_loader.h"
#include "ops/model_summary.h"

namespace nereid {

namespace {

// The bytes of one gradient of the parameters a part holds (a shard's shape
// where hybrid_partition cut it); 0 for a part that computes none (a server).
int64_t GradientBytesHeld(const GraphDef& part) {
  absl::flat_hash_set<std::string> trained;
  for (const NodeDef& n : part.node()) {
    auto parameter = n.attr().find("parameter");
    if (n.op() == "Gradient" && parameter != n.attr().end()) trained.insert(parameter->second.s());
  }
  int64_t bytes = 0;
  for (const NodeDef& n : part.node()) {
    auto shape = n.attr().find("shape");
    if (n.op() != "Parameter" || !trained.contains(n.name()) || shape == n.attr().end()) continue;
    int64_t elements = 1;
    for (int64_t d : shape->second.shape().dim()) elements *= std::max<int64_t>(d, 1);
    bytes += elements * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

}  // namespace

int64_t EvaluationBatch(const PlanDef& plan, const TrainOptions& options) {
  GraphFile source;
  source.path = "the plan's model";
  source.def = plan.source();
  absl::StatusOr<std::unique_ptr<Graph>> graph = LoadModel(source);
  if (!graph.ok()) return options.eval_batch;  // the plan was checked when it was built; keep the default
  const ModelSummary summary = SummarizeModel(**graph);
  const int64_t per_sample = std::max<int64_t>(1, summary.activation_bytes_per_sample);
  // One gradient of what the least-holding part trains: a rank whose part
  // holds shards has that much room, not the whole model's gradient. Every
  // rank reads the same plan, so all choose the same batch.
  int64_t gradient_bytes = summary.parameter_bytes;
  for (const WorkerGraph& w : plan.worker()) {
    const int64_t held = GradientBytesHeld(w.graph());
    if (held > 0) gradient_bytes = std::min(gradient_bytes, held);
  }
  const int64_t within_training = options.batch + gradient_bytes / per_sample;
  const int64_t fits = std::min(within_training, kEvaluationActivationBudget / per_sample);
  return std::max<int64_t>({1, options.batch, std::min(options.eval_batch, fits)});
}

absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, int64_t batch, const EvaluationPart& part,
                                           DataShard shard, bool equal_shards, StepInfo info,
                                           DataParallelGroup* group, const FeedLayout& layout) {
  data::LoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = false;
  lo.prefetch = 1;
  if (group != nullptr) {
    lo.rank = shard.index;
    lo.world = shard.count;
    lo.equal_shards = equal_shards;
    group->StartEvaluation();
  }
  std::vector<std::string> fetches = part.sends;
  const bool scores = !part.logits.empty();
  if (scores) {
    fetches.push_back(part.logits);
    fetches.push_back(part.loss);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader, data::BatchLoader::Create(test, lo));
  loader->StartEpoch(0);
  info.training = false;
  // Accuracy over the positions scored (each example's, or each sequence
  // position's with kIgnoredLabel skipped); the loss weighted by them, as the
  // loss averages over them.
  int64_t correct = 0, seen = 0;
  double loss_sum = 0;
  while (std::optional<data::Batch> batch = loader->Next()) {
    ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch, layout));
    info.step_in_epoch = batch->index_in_epoch;  // the key of its group collectives
    if (fetches.empty()) break;  // this rank's part takes no part in evaluation
    ASSIGN_OR_RETURN(std::vector<Tensor> out, executor.Evaluate(info, feeds, fetches));
    if (scores) {
      const Tensor& logits = out[part.sends.size()];
      const int64_t k = logits.rank() >= 2 ? logits.dim(logits.rank() - 1) : 0;
      const int64_t positions = static_cast<int64_t>(batch->labels.size());
      if (k < 1 || logits.num_elements() < positions * k) {
        return absl::InvalidArgumentError(absl::StrCat("logits '", part.logits, "' are ", logits.DebugString(),
                                                       " for ", positions, " labels of the batch; expected ",
                                                       positions, " rows of class scores"));
      }
      int64_t scored = 0;
      for (int64_t i = 0; i < positions; ++i) {
        if (batch->labels[i] == data::kIgnoredLabel) continue;
        const float* row = logits.data<float>() + i * k;
        int64_t best = std::max_element(row, row + k) - row;
        correct += best == batch->labels[i];
        ++scored;
      }
      loss_sum += out[part.sends.size() + 1].data<float>()[0] * scored;
      seen += scored;
    }
    if (options.report) {
      options.report(absl::StrCat("phase=eval epoch=", info.epoch, " batch=", batch->index_in_epoch));
    }
  }
  if (group != nullptr) {
    std::vector<double> sums = {static_cast<double>(correct), loss_sum, static_cast<double>(seen)};
    RETURN_IF_ERROR(group->SumAcrossRanks(sums));
    correct = static_cast<int64_t>(std::llround(sums[0]));
    loss_sum = sums[1];
    seen = static_cast<int64_t>(std::llround(sums[2]));
  }
  Evaluation e;
  if (seen > 0) {
    e.accuracy = static_cast<double>(correct) / seen;
    e.loss = loss_sum / seen;
  }
  return e;
}

}  // namespace nereid
