// Coded computing (RLNC, MDS) at run time: every step is one full-batch
// gradient step. Before the first, the coded workers build their coded
// partitions of the training set over the communicator (the encoding phase,
// its bytes counted); a worker that returns after leaving gets its partition
// again; the master (rank 0) scores the test set with the model's own
// forward graph, since its plan decodes coded results.

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coded/departure_plan.h"
#include "coded/linear_code.h"
#include "core/status_macros.h"
#include "ops/coded_round_stats.h"
#include "ops/model_loader.h"
#include "runtime/coded_partitions.h"
#include "runtime/strategy_runtime.h"

namespace nereid {
namespace {

class CodedRuntime : public StrategyRuntime {
 public:
  std::string name() const override { return "coded"; }

  // The master and the coded workers see the whole set, coded or not.
  DataShard Shard(const DataShard&) const override { return DataShard{}; }
  int64_t StepsPerEpoch(int64_t) const override { return 1; }

  // The master's feeds are the labels in the data's order; each coded
  // worker's its coded partition, built here.
  absl::Status Prepare(StrategyContext& c) override {
    if (c.group == nullptr) return absl::FailedPreconditionError("a coded plan runs on its master and coded workers");
    const int rank = c.options->rank;
    if (c.train->labels_per_example != 1) {
      return absl::UnimplementedError("coded computing takes one label per example, not one per position");
    }
    if (rank == 0) {
      ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate(DT_INT32, {c.train->num_examples}));
      std::memcpy(labels.raw(), c.train->labels.data(), labels.num_bytes());
      feeds_["labels"] = std::move(labels);
    }
    const PlanRecords::Coded& record = c.graph->header().records().coded();
    CodeSpec spec;
    ASSIGN_OR_RETURN(spec.scheme, ParseCodeScheme(record.scheme()));
    spec.n = record.n();
    spec.k = record.k();
    spec.degree = record.degree();
    spec.seed = record.seed();
    ASSIGN_OR_RETURN(LinearCode code, LinearCode::Make(spec));
    ASSIGN_OR_RETURN(departures_, DeparturePlan::Parse(record.departures(), spec.n, spec.seed));
    code_ = code;
    const TrafficCounters before = c.group->traffic();
    const absl::Time start = absl::Now();
    if (rank > 0) {
      ASSIGN_OR_RETURN(CodedPartition partition, BuildCodedPartition(*c.train, code, rank - 1, /*first_rank=*/1,
                                                                     c.group->communicator(),
                                                                     c.options->comm_timeout));
      feeds_["coded_rows"] = std::move(partition.rows);
      feeds_["coded_columns"] = std::move(partition.columns);
    }
    std::vector<double> sent = {static_cast<double>(c.group->traffic().bytes_sent - before.bytes_sent),
                                absl::ToDoubleSeconds(absl::Now() - start)};
    RETURN_IF_ERROR(c.group->SumAcrossRanks(sent));
    encoding_bytes_ = static_cast<int64_t>(sent[0]);
    encoding_seconds_ = sent[1] / c.options->workers;
    if (c.options->progress != nullptr && rank == 0) {
      std::fprintf(c.options->progress, "coded: %s code, %d data partitions on %d coded workers; encoding moved %.1f MiB\n",
                   CodeSchemeName(spec.scheme), spec.k, spec.n, sent[0] / (1 << 20));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<StepFeeds>> NextFeeds(StrategyContext& c) override {
    RETURN_IF_ERROR(ResendToReturningWorkers(c));
    return StepFeeds{feeds_, c.train->num_examples};
  }

  // The master's decodes this epoch: workers present per coded round and
  // results each decode used.
  absl::Status EndEpoch(StrategyContext& c, EpochMetrics& m) override {
    if (c.options->rank != 0) return absl::OkStatus();
    const CodedRoundTotals now = CodedRoundStats::Global().totals();
    const double gathers = static_cast<double>(now.gathers - seen_.gathers);
    if (gathers > 0) {
      const double present = static_cast<double>(now.present - seen_.present) / gathers;
      const double used = static_cast<double>(now.answers_used - seen_.answers_used) / gathers;
      m.strategy["coded_workers_present"] = present;
      m.strategy["coded_results_decoded"] = used;
      m.note = absl::StrFormat(", %.1f workers present, decoded from %.1f", present, used);
    }
    seen_ = now;
    return absl::OkStatus();
  }

  // The master's decodes need the workers' coded training data, so it
  // scores with the model's own forward graph and its current parameters.
  absl::StatusOr<Executor*> Evaluator(StrategyContext& c, EvaluationPart& part) override {
    if (c.options->rank != 0) return nullptr;
    if (evaluator_ == nullptr) {
      GraphFile source;
      source.path = absl::StrCat(c.options->model_path, " (the model the plan came from)");
      source.def = c.plan->source();
      ASSIGN_OR_RETURN(model_, LoadModel(source));
      ExecutorOptions eopts;
      eopts.threads = c.options->threads;
      ASSIGN_OR_RETURN(evaluator_, Executor::Create(model_.get(), eopts));
    }
    for (const auto& [name, value] : c.executor->State()) {
      if (model_->FindNode(name) != nullptr) RETURN_IF_ERROR(evaluator_->SetState(name, value));
    }
    part.logits = GraphAttr(*model_, "logits");
    part.loss = GraphAttr(*model_, "loss");
    return evaluator_.get();
  }

  // The encoding phase's bytes (every rank's sends) and seconds, and what
  // the master's decodes saw: per gather (two a step), the workers present
  // and gone, the results a decode used, the wait from posting the receives
  // to a decodable set, the solve. Every rank reports them.
  absl::Status Summarize(StrategyContext& c, Json& metrics) override {
    const CodedRoundTotals t = CodedRoundStats::Global().totals();
    const double g = std::max<double>(1, static_cast<double>(t.gathers));
    std::vector<double> figures = {static_cast<double>(resent_bytes_), t.present / g, t.gone / g, t.answers_used / g,
                                   absl::ToDoubleSeconds(t.wait) / g, absl::ToDoubleSeconds(t.decode) / g};
    RETURN_IF_ERROR(c.group->SumAcrossRanks(figures));
    Json coded;
    coded["encoding_bytes"] = encoding_bytes_;
    coded["encoding_seconds"] = encoding_seconds_;
    coded["resent_bytes"] = static_cast<int64_t>(figures[0]);
    coded["present_per_gather"] = figures[1];
    coded["gone_per_gather"] = figures[2];
    coded["answers_per_decode"] = figures[3];
    coded["wait_seconds_per_gather"] = figures[4];
    coded["decode_seconds_per_gather"] = figures[5];
    metrics["coded"] = std::move(coded);
    return absl::OkStatus();
  }

 private:
  // A worker that left lost its coded partition; in the round it returns,
  // the holders send it the partitions again (counted in resent_bytes). The
  // master takes no part.
  absl::Status ResendToReturningWorkers(StrategyContext& c) {
    if (c.step == 0 || departures_.empty() || c.options->rank == 0) return absl::OkStatus();
    std::vector<int> returning;
    for (int w = 0; w < code_->spec().n; ++w) {
      if (departures_.Gone(c.step - 1, w) && !departures_.Gone(c.step, w)) returning.push_back(w);
    }
    if (returning.empty()) return absl::OkStatus();
    const int64_t before = c.group->traffic().bytes_sent;
    ASSIGN_OR_RETURN(std::optional<CodedPartition> mine,
                     ResendCodedPartitions(*c.train, *code_, c.options->rank - 1, returning, /*first_rank=*/1,
                                           c.group->communicator(), c.options->comm_timeout));
    resent_bytes_ += c.group->traffic().bytes_sent - before;
    if (mine.has_value()) {
      feeds_["coded_rows"] = std::move(mine->rows);
      feeds_["coded_columns"] = std::move(mine->columns);
    }
    return absl::OkStatus();
  }

  FeedMap feeds_;  // what every step feeds this rank
  std::optional<LinearCode> code_;
  DeparturePlan departures_;
  int64_t encoding_bytes_ = 0;
  double encoding_seconds_ = 0;
  int64_t resent_bytes_ = 0;  // this rank's sends to returning workers
  CodedRoundTotals seen_;     // the master's figures at the last epoch's end
  std::unique_ptr<Graph> model_;  // the model, for the master's evaluation
  std::unique_ptr<Executor> evaluator_;
};

}  // namespace

NEREID_REGISTER_STRATEGY_RUNTIME(StrategyRuntimeInfo{"coded", [] { return std::make_unique<CodedRuntime>(); }});

}  // namespace nereid
