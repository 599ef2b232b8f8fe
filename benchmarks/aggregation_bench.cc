#include "benchmarks/aggregation_bench.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "compress/codec.h"
#include "compress/communicator_codec_comm.h"
#include "core/json.h"
#include "core/stats.h"
#include "core/status_macros.h"

namespace nereid {
namespace {

constexpr uint32_t kControlTag = 0x7100;
constexpr uint32_t kItemTagBase = 0x7200;  // + the item's position
constexpr absl::Duration kTimeout = absl::Seconds(300);

// One plan made runnable on this rank: codecs, their state, gradients.
class PlanRun {
 public:
  static absl::StatusOr<std::unique_ptr<PlanRun>> Create(const AggregationPlan& plan, int rank) {
    auto run = std::unique_ptr<PlanRun>(new PlanRun());
    run->plan_ = &plan;
    std::mt19937_64 random(1000 + rank);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (const AggregationItem& item : plan.items) {
      Slot slot;
      for (size_t g = 0; g < item.gradients.size(); ++g) {
        Gradient one;
        one.values.resize(ElementCount(item.gradients[g]));
        for (float& v : one.values) v = normal(random);
        one.out.resize(one.values.size());
        if (!item.method.empty()) {
          ASSIGN_OR_RETURN(one.codec, CodecRegistry::Global().Create(item.method));
          ASSIGN_OR_RETURN(CodecOptions options, CodecOptions::Parse(item.options));
          RETURN_IF_ERROR(one.codec->Init(item.gradients[g], options));
          for (const CodecStateSpec& spec : one.codec->State()) one.state.emplace_back(ElementCount(spec.dims), 0.0f);
          one.layer = item.layer + static_cast<int64_t>(g);
        }
        slot.gradients.push_back(std::move(one));
      }
      run->slots_.push_back(std::move(slot));
    }
    return run;
  }

  // One step: every collective in order. Adds to *codec the encode/decode time.
  absl::Status Step(Communicator& comm, absl::Duration* codec) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      CollectiveOptions options{static_cast<uint32_t>(kItemTagBase + i), kTimeout};
      if (plan_->items[i].method.empty()) {
        Gradient& dense = slot.gradients[0];
        ASSIGN_OR_RETURN(options.wire, ParseWireType(plan_->items[i].wire));
        std::copy(dense.values.begin(), dense.values.end(), dense.out.begin());
        RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(dense.out), ReduceOp::kAvg, options));
        continue;
      }
      std::vector<FusedGradient> fused;
      for (Gradient& g : slot.gradients) {
        FusedGradient f{g.codec.get(), CodecStep{}, g.values, {}, absl::MakeSpan(g.out)};
        f.step.step = step_;
        f.step.seed = 1;
        f.step.layer = g.layer;
        for (auto& s : g.state) f.state.push_back(absl::MakeSpan(s));
        fused.push_back(std::move(f));
      }
      CommunicatorCodecComm codec_comm(comm, options);
      absl::Time start = absl::Now();
      RETURN_IF_ERROR(AverageFused(fused, codec_comm));
      *codec += absl::Now() - start - codec_comm.in_collectives();
    }
    ++step_;
    return absl::OkStatus();
  }

 private:
  struct Gradient {
    std::vector<float> values, out;
    std::unique_ptr<GradientCodec> codec;  // null: part of a dense allreduce
    std::vector<std::vector<float>> state;
    int64_t layer = 0;
  };
  struct Slot {
    std::vector<Gradient> gradients;
  };
  const AggregationPlan* plan_ = nullptr;
  std::vector<Slot> slots_;
  int64_t step_ = 0;
};

// The slowest rank's value of each entry of `mine`.
absl::StatusOr<std::vector<double>> Slowest(Communicator& comm, const std::vector<double>& mine) {
  std::vector<float> in(mine.begin(), mine.end()), all(in.size() * comm.world());
  RETURN_IF_ERROR(comm.AllGather(in, absl::MakeSpan(all), {kControlTag, kTimeout}));
  std::vector<double> slowest(mine.size(), 0);
  for (int r = 0; r < comm.world(); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) slowest[i] = std::max<double>(slowest[i], all[r * mine.size() + i]);
  }
  return slowest;
}

}  // namespace

absl::StatusOr<AggregationPlan> AggregationPlanOf(const Graph& planned, const std::string& label) {
  std::map<int64_t, AggregationItem> by_bucket;
  for (Node* n : planned.nodes()) {
    if (n->op() != "AllReduce" && n->op() != "CompressedAllReduce") continue;
    const auto& attr = n->def().attr();
    AggregationItem item;
    item.name = n->name();
    if (n->op() == "AllReduce") {
      int64_t elements = 0;
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Edge* e = n->input_edge(i);
        elements += e->src->outputs()[e->src_port].shape.KnownElements();
      }
      item.gradients = {{elements}};
      if (attr.count("wire") > 0) item.wire = attr.at("wire").s();
    } else {
      const int64_t gradients = attr.count("gradients") > 0 ? attr.at("gradients").i() : 1;
      for (int64_t g = 0; g < gradients; ++g) item.gradients.push_back(n->outputs()[g].shape.dims());
      item.method = attr.at("method").s();
      item.options = attr.at("options").s();
      item.layer = attr.at("layer").i();
    }
    by_bucket[attr.at("bucket").i()] = std::move(item);
  }
  if (by_bucket.empty()) return absl::FailedPreconditionError(absl::StrCat(label, ": the plan has no collectives"));
  AggregationPlan plan{label, {}};
  for (auto& [bucket, item] : by_bucket) plan.items.push_back(std::move(item));
  return plan;
}

absl::StatusOr<std::vector<AggregationRow>> RunAggregationBench(Communicator& comm,
                                                                const std::vector<AggregationPlan>& plans,
                                                                const AggregationBenchOptions& options) {
  std::vector<std::unique_ptr<PlanRun>> runs;
  std::vector<AggregationRow> rows(plans.size());
  for (size_t p = 0; p < plans.size(); ++p) {
    ASSIGN_OR_RETURN(std::unique_ptr<PlanRun> run, PlanRun::Create(plans[p], comm.rank()));
    absl::Duration ignored;
    for (int s = 0; s < options.warmup_steps; ++s) RETURN_IF_ERROR(run->Step(comm, &ignored));
    runs.push_back(std::move(run));
    rows[p].label = plans[p].label;
    for (const AggregationItem& item : plans[p].items) {
      for (const auto& dims : item.gradients) rows[p].gradient_bytes += ElementCount(dims) * 4;
    }
  }
  std::vector<std::vector<double>> seconds(plans.size()), codec_seconds(plans.size());
  std::vector<int64_t> bytes(plans.size(), 0);
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t p = 0; p < plans.size(); ++p) {
      RETURN_IF_ERROR(comm.Barrier({kControlTag, kTimeout}));
      std::vector<double> times, codec_times;
      for (int i = 0; i < options.iterations; ++i) {
        TrafficCounters before = comm.traffic();
        absl::Duration codec = absl::ZeroDuration();
        absl::Time start = absl::Now();
        RETURN_IF_ERROR(runs[p]->Step(comm, &codec));
        times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
        codec_times.push_back(absl::ToDoubleSeconds(codec));
        bytes[p] += comm.traffic().bytes_sent - before.bytes_sent;
      }
      ASSIGN_OR_RETURN(std::vector<double> slowest, Slowest(comm, times));
      ASSIGN_OR_RETURN(std::vector<double> slowest_codec, Slowest(comm, codec_times));
      seconds[p].insert(seconds[p].end(), slowest.begin(), slowest.end());
      codec_seconds[p].insert(codec_seconds[p].end(), slowest_codec.begin(), slowest_codec.end());
    }
  }
  for (size_t p = 0; p < plans.size(); ++p) {
    rows[p].iterations = static_cast<int>(seconds[p].size());
    rows[p].seconds = Median(seconds[p]);
    rows[p].codec_seconds = Median(codec_seconds[p]);
    rows[p].bytes_sent = static_cast<double>(bytes[p]) / std::max(1, rows[p].iterations);
  }
  return rows;
}

std::string FormatAggregationTable(const std::vector<AggregationRow>& rows, int world) {
  std::string out = absl::StrFormat(
      "%d ranks; medians of the slowest rank per step\n\n"
      "| method | gradient | sent/rank/step | wire ratio | aggregation | speedup | codec | codec / saved |\n"
      "|---|---|---|---|---|---|---|---|\n",
      world);
  const AggregationRow& base = rows.front();
  for (const AggregationRow& r : rows) {
    const double saved = base.seconds - (r.seconds - r.codec_seconds);
    std::string codec_share = &r == &base ? "-"
                              : saved > 0 ? absl::StrFormat("%.0f%%", 100 * r.codec_seconds / saved)
                                          : "saved nothing";
    absl::StrAppendFormat(&out, "| %s | %.2f MiB | %.3f MiB | %.1fx | %.1f ms | %.2fx | %.2f ms | %s |\n", r.label,
                          r.gradient_bytes / 1048576.0, r.bytes_sent / 1048576.0,
                          r.bytes_sent > 0 ? base.bytes_sent / r.bytes_sent : 0.0, r.seconds * 1e3,
                          base.seconds / r.seconds, r.codec_seconds * 1e3, codec_share);
  }
  return out;
}

std::string AggregationJson(const std::vector<AggregationRow>& rows, int world) {
  Json j;
  j["world"] = int64_t{world};
  Json rows_json = Json::array();
  for (const AggregationRow& r : rows) {
    Json row;
    row["method"] = r.label;
    row["gradient_bytes"] = r.gradient_bytes;
    row["bytes_sent_per_step"] = r.bytes_sent;
    row["seconds"] = r.seconds;
    row["codec_seconds"] = r.codec_seconds;
    row["iterations"] = int64_t{r.iterations};
    rows_json.push_back(std::move(row));
  }
  j["rows"] = std::move(rows_json);
  return JsonLine(j) + "\n";
}

}  // namespace nereid
