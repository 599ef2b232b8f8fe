#ifndef NEREID_RUNTIME_STRATEGY_RUNTIME_H_
#define NEREID_RUNTIME_STRATEGY_RUNTIME_H_

// What a strategy needs at run time beyond its plan, as hooks the training
// loop (runtime/trainer.cc) calls at fixed points: which data a rank feeds,
// what happens around evaluation, the figures it adds to the metrics. The
// loop names no strategy: a plan whose records (PlanRecords, graph.proto)
// hold a strategy's record (the one its pass sets, e.g. `gossip`, `coded`)
// gets that strategy's hooks, registered in one file each under
// runtime/strategies/:
//
//   NEREID_REGISTER_STRATEGY_RUNTIME(StrategyRuntimeInfo{"coded", [] { ... }});
//
// The loop's order, with the hooks:
//   plan, connect, load data -> Prepare -> executor, resume, state check
//   per epoch: per step NextFeeds (or the next batch) ... EndEpoch
//              BeforeEvaluation -> Evaluator -> test set -> state restored
//   Summarize -> the metrics

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/json.h"
#include "core/registration.h"
#include "core/tensor.h"
#include "data/datasets.h"
#include "graph/graph.pb.h"
#include "graph/ir.h"
#include "runtime/data_parallel_group.h"
#include "runtime/data_shard.h"
#include "runtime/test_set_evaluation.h"
#include "runtime/trainer.h"
#include "schedulers/executor.h"

namespace nereid {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What the loop lends the hooks; the pointers outlive every hook call.
struct StrategyContext {
  const TrainOptions* options = nullptr;
  const Graph* graph = nullptr;  // this rank's part of the plan
  const PlanDef* plan = nullptr;
  DataParallelGroup* group = nullptr;  // null when training alone
  Executor* executor = nullptr;        // set before the first step
  const absl::flat_hash_set<std::string>* per_rank = nullptr;  // state each rank keeps its own
  std::shared_ptr<const data::Dataset> train;
  int64_t step = 0;  // the next step to start
};

// A step's feeds when the strategy supplies them, and the examples they hold.
struct StepFeeds {
  FeedMap feeds;
  int64_t examples = 0;
};

class StrategyRuntime {
 public:
  virtual ~StrategyRuntime() = default;
  // The name the metrics give the run's strategy.
  virtual std::string name() const = 0;
  // Whether the ranks keep models of their own (--gossip-eval applies).
  virtual bool KeepsPerRankModels() const { return false; }
  // The rank's share of the training set (`shard`: the plan's).
  virtual DataShard Shard(const DataShard& shard) const { return shard; }
  // After the data is loaded, before the executor exists.
  virtual absl::Status Prepare(StrategyContext& context) { return absl::OkStatus(); }
  // Steps an epoch takes (`batches`: the loader's).
  virtual int64_t StepsPerEpoch(int64_t batches) const { return batches; }
  // What the next step feeds; nullopt: the loader's next batch.
  virtual absl::StatusOr<std::optional<StepFeeds>> NextFeeds(StrategyContext& context) { return std::nullopt; }
  // At an epoch's end (every step applied): its figures into m.strategy
  // and m.note.
  virtual absl::Status EndEpoch(StrategyContext& context, EpochMetrics& m) { return absl::OkStatus(); }
  // Before the test set is scored (`last`: the run's last evaluation):
  // returns the state to restore after it (empty: none).
  virtual absl::StatusOr<NamedTensors> BeforeEvaluation(StrategyContext& context, bool last, EpochMetrics& m) {
    return NamedTensors{};
  }
  // The executor that scores the test set, with `part` set for it; null:
  // the training executor.
  virtual absl::StatusOr<Executor*> Evaluator(StrategyContext& context, EvaluationPart& part) { return nullptr; }
  // At the end (collective: every rank calls it), the run's figures.
  virtual absl::Status Summarize(StrategyContext& context, Json& metrics) { return absl::OkStatus(); }
};

struct StrategyRuntimeInfo {
  std::string record;  // the PlanRecords field (a message) the strategy's pass sets
  std::function<std::unique_ptr<StrategyRuntime>()> factory;
};

class StrategyRuntimeRegistry {
 public:
  static StrategyRuntimeRegistry& Global();
  absl::Status Register(StrategyRuntimeInfo info);
  // The hooks for `graph`'s strategy; null when none of the registered
  // records is set (the loop's defaults serve).
  std::unique_ptr<StrategyRuntime> For(const Graph& graph) const;

 private:
  std::vector<StrategyRuntimeInfo> entries_;
};

// The name of a plan's strategy when no hooks name it: data_parallel,
// hybrid, parameter_server or model_parallel, and its ranks per model copy.
std::pair<std::string, int64_t> PlainStrategyOf(const Graph& graph, int world, int data_shards);

}  // namespace nereid

#define NEREID_REGISTER_STRATEGY_RUNTIME(...) NEREID_REGISTER(::nereid::StrategyRuntimeRegistry, __VA_ARGS__)

#endif  // NEREID_RUNTIME_STRATEGY_RUNTIME_H_
