// Gossip (SGP) at run time: each rank keeps its own model. Before the test
// set is scored the ranks measure how far apart their models are and, after
// the last epoch (or every epoch with --gossip-eval average), take their
// average; push-sum's total weight is reported to show none was lost.

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "runtime/strategy_runtime.h"

namespace nereid {
namespace {

class GossipRuntime : public StrategyRuntime {
 public:
  std::string name() const override { return "gossip"; }
  bool KeepsPerRankModels() const override { return true; }

  absl::StatusOr<NamedTensors> BeforeEvaluation(StrategyContext& c, bool last, EpochMetrics& m) override {
    if (c.group == nullptr) return NamedTensors{};
    const bool average_for_now = !last && c.options->gossip_eval == "average";
    NamedTensors own;
    if (average_for_now) {
      ASSIGN_OR_RETURN(own, OwnState(c));
    }
    ASSIGN_OR_RETURN(const double distance, AverageModels(c, /*adopt=*/last || average_for_now));
    m.strategy["consensus_distance"] = distance;
    m.note = absl::StrFormat(", consensus distance %.2e", distance);
    return own;
  }

  absl::Status Summarize(StrategyContext& c, Json& metrics) override {
    if (weight_total_ >= 0) metrics["push_sum_weight_total"] = weight_total_;
    return absl::OkStatus();
  }

 private:
  // Each rank's trained parameters (its own; optimizer state and the
  // push-sum weight aside), by name. With overlap the model is the de-biased
  // x / w (what the forward pass reads), under the parameters' names.
  static absl::StatusOr<NamedTensors> Model(const StrategyContext& c) {
    const PlanRecords::Gossip& record = c.graph->header().records().gossip();
    const int64_t overlap = record.overlap();
    NamedTensors model;
    float weight = 1;
    for (auto& [name, value] : c.executor->State()) {
      if (name == record.weight_state()) weight = value.data<float>()[0];
    }
    for (auto& [name, value] : c.executor->State()) {
      const Node* n = c.graph->FindNode(name);
      if (!c.per_rank->contains(name) || n == nullptr || !NodeAttrBool(*n, "trainable", true)) continue;
      if (overlap == 0) {
        model.emplace_back(name, value);
        continue;
      }
      ASSIGN_OR_RETURN(Tensor debiased, value.Clone());
      float* v = debiased.data<float>();
      for (int64_t i = 0; i < debiased.num_elements(); ++i) v[i] /= weight;
      model.emplace_back(name, std::move(debiased));
    }
    return model;
  }

  // A copy of this rank's own state (parameters, push-sum weight, pushes in
  // flight, optimizer state), to go back to after scoring the average.
  static absl::StatusOr<NamedTensors> OwnState(const StrategyContext& c) {
    NamedTensors own;
    for (const auto& [name, value] : c.executor->State()) {
      if (!c.per_rank->contains(name)) continue;
      ASSIGN_OR_RETURN(Tensor copy, value.Clone());
      own.emplace_back(name, std::move(copy));
    }
    return own;
  }

  // Push-sum's mass over the ranks: every weight plus the weight in flight
  // (overlap's delayed pushes); the world size when nothing is lost.
  static absl::StatusOr<double> PushSumMass(const StrategyContext& c) {
    const PlanRecords::Gossip& record = c.graph->header().records().gossip();
    const absl::flat_hash_set<std::string> weights(record.weight_in_flight_state().begin(),
                                                   record.weight_in_flight_state().end());
    std::vector<double> mass = {0};
    for (const auto& [name, value] : c.executor->State()) {
      if (name == record.weight_state() || weights.contains(name)) mass[0] += value.data<float>()[0];
    }
    RETURN_IF_ERROR(c.group->SumAcrossRanks(mass));
    return mass[0];
  }

  // The average of the ranks' models (one allreduce); with `adopt`, every
  // rank takes it. Returns the mean distance of the ranks' models from it,
  // relative to its norm.
  absl::StatusOr<double> AverageModels(StrategyContext& c, bool adopt) {
    ASSIGN_OR_RETURN(weight_total_, PushSumMass(c));
    ASSIGN_OR_RETURN(NamedTensors model, Model(c));
    std::vector<double> mine;
    for (const auto& [name, t] : model) mine.insert(mine.end(), t.data<float>(), t.data<float>() + t.num_elements());
    ASSIGN_OR_RETURN(std::vector<double> mean, c.group->AverageAcrossRanks(*c.executor, model, adopt));
    const PlanRecords::Gossip& record = c.graph->header().records().gossip();
    if (adopt && record.overlap() > 0) {
      // x is now the average of the de-biased models: its weight is 1, and
      // the pushes still in flight (mixed into the average) are dropped.
      absl::flat_hash_set<std::string> reset_names(record.in_flight_state().begin(), record.in_flight_state().end());
      reset_names.insert(record.weight_in_flight_state().begin(), record.weight_in_flight_state().end());
      reset_names.insert(record.weight_state());
      for (const auto& [name, value] : c.executor->State()) {
        if (!reset_names.contains(name)) continue;
        ASSIGN_OR_RETURN(Tensor reset, Tensor::Zeros(DT_FLOAT, value.dims()));
        if (name == record.weight_state()) reset.data<float>()[0] = 1;
        RETURN_IF_ERROR(c.executor->SetState(name, reset));
      }
    }
    double distance2 = 0, norm2 = 0;
    for (size_t i = 0; i < mean.size(); ++i) {
      distance2 += (mine[i] - mean[i]) * (mine[i] - mean[i]);
      norm2 += mean[i] * mean[i];
    }
    std::vector<double> distance = {std::sqrt(distance2)};
    RETURN_IF_ERROR(c.group->SumAcrossRanks(distance));
    return norm2 > 0 ? distance[0] / c.options->workers / std::sqrt(norm2) : 0.0;
  }

  double weight_total_ = -1;  // push-sum's total weight at the last evaluation
};

}  // namespace

NEREID_REGISTER_STRATEGY_RUNTIME(StrategyRuntimeInfo{"gossip", [] { return std::make_unique<GossipRuntime>(); }});

}  // namespace nereid
