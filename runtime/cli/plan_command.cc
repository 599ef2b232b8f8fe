// nereid plan: applies a pass pipeline to a model and writes the plan.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/graph_io.h"
#include "graph/plan_io.h"
#include "graph/import_export.h"
#include "plan/split_by_rank.h"
#include "plan/build_plan.h"
#include "passes/pass_manager.h"
#include "runtime/cli/command.h"
#include "runtime/cli/rank_parts.h"
#include "graph/placement.h"
#include "runtime/cli/flags.h"

namespace nereid {
namespace {

Flags PlanFlags() {
  Flags f("nereid plan MODEL --passes PIPELINE -o PLAN [--workers N] [--per-rank] [--dump-after PASS[,PASS]]",
          "Runs the passes in order (the graph is validated after each) and writes the planned graph.\n"
          "With --per-rank, writes every rank's graph instead (a PlanDef; name binary ones *.plan.pb):\n"
          "nereid run and nereid check read either kind.\n"
          "PIPELINE is e.g. autodiff,sgd(lr=0.05,momentum=0.9,weight_decay=5e-4); 'nereid passes' lists\n"
          "every pass and gradient codec with its options and defaults.");
  f.Value("passes", "PIPELINE", "the passes, in order")
      .Value("o,output", "PLAN", "where to write the plan (.pbtxt text, .pb binary)")
      .Value("workers", "N", "plan for N workers (default 1)")
      .Switch("per-rank", "write one graph per rank (a PlanDef)")
      .Value("dump-after", "PASS[,PASS]", "also write the graph after these passes (PLAN.after-PASS.pbtxt)");
  return f;
}

GraphFormat FormatFor(const std::string& path) {
  return absl::EndsWith(path, ".pb") ? GraphFormat::kBinary : GraphFormat::kText;
}

int Plan(const std::vector<std::string>& args) {
  Flags flags = PlanFlags();
  absl::Status parsed = flags.Parse(args);
  if (parsed.ok() && (flags.positional().size() != 1 || !flags.Has("output"))) {
    parsed = absl::InvalidArgumentError("nereid plan takes one model and -o PLAN (see nereid plan --help)");
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  const std::string model = flags.positional()[0], output = flags.String("output");
  // Passes that partition the model (hybrid_partition) plan for this many.
  absl::StatusOr<int64_t> workers = flags.Int("workers", 1);
  if (!workers.ok() || *workers < 1 || *workers > 1 << 20) {
    std::fprintf(stderr, "error: --workers must be an integer in [1, 1048576]\n");
    return kExitUsage;
  }
  const PlanTarget target{static_cast<int>(*workers)};
  // The passes a run on this many workers implies join, as with `nereid run`.
  absl::StatusOr<std::vector<PipelineStage>> pipeline = PipelineFor(flags.String("passes"), target);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "error: --passes: %s\n", std::string(pipeline.status().message()).c_str());
    return kExitUsage;
  }
  const bool per_rank = flags.Has("per-rank");
  if (per_rank && absl::EndsWith(output, ".pb") && !absl::EndsWith(output, ".plan.pb")) {
    std::fprintf(stderr, "error: name a binary per-rank plan *.plan.pb (%s would be read as one graph)\n",
                 output.c_str());
    return kExitUsage;
  }
  PlanRequest request{model, *std::move(pipeline), target};
  request.check_trainable = false;  // a compiler's output is looked at, not only trained
  if (flags.Has("dump-after")) request.pipeline_options.dump_after = absl::StrSplit(flags.String("dump-after"), ',');
  request.pipeline_options.dump = [&](const std::string& pass, const Graph& g) {
    std::string path = absl::StrCat(output, ".after-", pass, ".pbtxt");
    std::printf("wrote %s\n", path.c_str());
    return WriteGraphFile(ExportGraph(g), path, GraphFormat::kText);
  };
  absl::StatusOr<BuiltPlan> built = BuildPlan(request);
  if (!built.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(built.status().message()).c_str());
    return kExitFailure;
  }
  for (const PassReport& r : built->reports) std::printf("%s\n", FormatReport(r).c_str());
  if (per_rank) {
    absl::Status written = WritePlanFile(built->plan, output);
    if (!written.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(written.message()).c_str());
      return kExitFailure;
    }
    std::printf("wrote %s (%s)\n", output.c_str(),
                built->plan.replicated() ? absl::StrCat("one graph for all ", *workers, " ranks").c_str()
                                         : absl::StrCat(built->plan.worker_size(), " ranks' graphs").c_str());
  }
  if (built->whole == nullptr) return kExitOk;  // the model was a per-rank plan already
  const Graph& graph = *built->whole;
  if (!per_rank) {
    absl::Status written = WriteGraphFile(ExportGraph(graph), output, FormatFor(output));
    if (!written.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(written.message()).c_str());
      return kExitFailure;
    }
    std::printf("wrote %s (%d nodes)\n", output.c_str(), graph.num_nodes());
  }
  // A plan whose ranks run different parts, or declare groups: each rank's.
  if (*workers > 1 && (HasPlacedNodes(graph) || graph.header().records().group_size() > 0)) {
    absl::StatusOr<std::vector<std::unique_ptr<Graph>>> parts = SplitPlanAcrossRanks(graph, static_cast<int>(*workers));
    if (!parts.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(parts.status().message()).c_str());
      return kExitFailure;
    }
    std::fputs(RankPartsTable(*parts).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"plan", "apply compiler passes to a model and write the plan", [] { return PlanFlags().Help(); }, Plan});

}  // namespace nereid
