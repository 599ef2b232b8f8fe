// nereid check MODEL: validates a model and prints its per-node summary.

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/placement.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "graph/dot_export.h"
#include "ops/model_loader.h"
#include "ops/model_summary.h"
#include "plan/build_plan.h"
#include "plan/split_by_rank.h"
#include "ops/trainability.h"
#include "plan/plan_file.h"
#include "graph/plan_io.h"
#include "runtime/cli/command.h"
#include "runtime/cli/flags.h"
#include "runtime/cli/rank_parts.h"

namespace nereid {
namespace {

Flags CheckFlags() {
  Flags f("nereid check MODEL [--passes P] [--workers N] [--json PATH] [--dot FILE] [--dataset NAME] [--forward-only]",
          "Loads MODEL (protobuf text .pbtxt, binary .pb, or .onnx), validates it and infers\n"
          "every node's output shape, and checks it can train as written: a scalar float\n"
          "`loss`, every Input fed by the dataset (--dataset, else the graph's) in shapes it\n"
          "gives (--forward-only skips this). Prints, per node: op, output shape and dtype,\n"
          "parameter count, forward FLOPs and activation bytes per sample (the batch\n"
          "dimension counted as 1); then the totals. On a bad model, prints the first\n"
          "error (file:line:col: node 'NAME' (OP): what is wrong) and exits 1.\n"
          "A plan made for N workers (nereid plan --workers N) is also checked as a\n"
          "whole: every rank's part loads, every Send has its Recv on the peer rank\n"
          "(same channel and shape), and every process group's members issue the same\n"
          "collectives in the same order; an error names the ranks and nodes.\n"
          "A per-rank plan (nereid plan --per-rank) is checked the same way, on the\n"
          "graphs it holds, and each rank's part is summarised.\n"
          "With --passes or --workers, MODEL is planned first exactly as `nereid run`\n"
          "would plan it (the implied passes added; nothing is written), and the plan\n"
          "is what is checked.");
  f.Value("passes", "P", "plan MODEL with this pipeline first (default: run's, autodiff,sgd(...))")
      .Value("workers", "N", "plan for N workers (default 1)")
      .Value("servers", "S", "plan with S parameter servers beside the workers, as run --servers");
  f.Value("json", "PATH", "write the same report as JSON to PATH (- : to standard output, instead of the table)")
      .Value("dot", "FILE", "also write the graph as Graphviz to FILE")
      .Value("dataset", "NAME", "check the inputs against this dataset instead of the graph's")
      .Switch("forward-only", "skip the training checks (loss, fed inputs)");
  return f;
}

// The request `nereid run --passes P --workers N --servers S` would plan
// MODEL with (plan/build_plan.h); an error is the command line's.
absl::StatusOr<PlanRequest> CheckPlanRequest(const Flags& flags, const std::string& model) {
  absl::StatusOr<int64_t> workers = flags.Int("workers", 1), servers = flags.Int("servers", 0);
  if (!workers.ok() || !servers.ok() || *workers < 1 || *servers < 0 || *workers + *servers > 1 << 20) {
    return absl::InvalidArgumentError("--workers must be at least 1 and --servers at least 0 (at most 1048576 in all)");
  }
  const PlanTarget target{static_cast<int>(*workers + *servers), static_cast<int>(*servers)};
  absl::StatusOr<std::vector<PipelineStage>> pipeline = PipelineFor(flags.String("passes"), target);
  if (!pipeline.ok()) return absl::InvalidArgumentError(absl::StrCat("--passes: ", pipeline.status().message()));
  PlanRequest request{model, *std::move(pipeline), target, flags.String("dataset")};
  request.check_trainable = !flags.Has("forward-only");
  request.whole_only = true;  // split by rank below, as for a plan file
  return request;
}

// MODEL as one graph: the plan BuildPlan makes of it for `request`, or as
// it is without one.
absl::StatusOr<std::unique_ptr<Graph>> LoadForCheck(const std::string& model, const std::optional<PlanRequest>& request) {
  if (!request.has_value()) return LoadModel(model);
  ASSIGN_OR_RETURN(BuiltPlan built, BuildPlan(*request));
  return std::move(built.whole);  // not null: a per-rank plan file is checked before this
}

// The JSON report to `path`: "-" is standard output.
int EmitJson(const std::string& path, const std::string& json) {
  if (path == "-") {
    std::fputs(json.c_str(), stdout);
    return kExitOk;
  }
  if (absl::Status written = WriteFileAtomically(path, json); !written.ok()) {
    std::fprintf(stderr, "error: --json: %s\n", std::string(written.message()).c_str());
    return kExitFailure;
  }
  return kExitOk;
}

// 669706 -> "669,706"
std::string Grouped(int64_t n) {
  std::string digits = absl::StrCat(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// 1536 -> "1.5 KiB"

std::string OutputText(const NodeSummary& n) {
  return absl::StrJoin(n.outputs, " ", [](std::string* out, const ShapeAndType& s) {
    absl::StrAppend(out, s.shape.ToString(), " ", DataTypeName(s.dtype));
  });
}

std::string FormatTable(const std::string& path, const ModelSummary& summary) {
  std::vector<std::vector<std::string>> rows = {{"node", "op", "output", "params", "FLOPs/sample", "act/sample"}};
  for (const NodeSummary& n : summary.nodes) {
    std::string params = n.parameters > 0 ? Grouped(n.parameters)
                         : n.state > 0    ? absl::StrCat(Grouped(n.state), " (state)")
                                          : "-";
    rows.push_back({n.name, n.op, OutputText(n), params, n.flops_per_sample ? Grouped(n.flops_per_sample) : "-",
                    n.activation_bytes_per_sample ? Bytes(n.activation_bytes_per_sample) : "-"});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out = absl::StrCat(path, ": ", summary.nodes.size(), " nodes\n\n");
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const std::string& cell = rows[r][i];
      std::string pad(width[i] - cell.size(), ' ');
      bool right = i >= 3;  // numbers align right
      absl::StrAppend(&out, i ? "  " : "", right ? pad + cell : cell + (i + 1 < rows[r].size() ? pad : ""));
    }
    out += "\n";
    if (r == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  absl::StrAppend(&out, "\ntrainable parameters:  ", Grouped(summary.trainable_parameters), "\n");
  if (summary.state_elements > 0) {
    absl::StrAppend(&out, "non-trainable state:   ", Grouped(summary.state_elements), "\n");
  }
  absl::StrAppend(&out, "parameter bytes:       ", Grouped(summary.parameter_bytes), " (",
                  Bytes(summary.parameter_bytes), ")\n");
  if (summary.has_gradients) {
    absl::StrAppend(&out, "step FLOPs/sample:     ", Grouped(summary.flops_per_sample),
                    " (forward and backward; optimizer updates are per step)\n");
  } else {
    absl::StrAppend(&out, "forward FLOPs/sample:  ", Grouped(summary.flops_per_sample), "\n");
  }
  absl::StrAppend(&out, "activations/sample:    ", Grouped(summary.activation_bytes_per_sample), " bytes (",
                  Bytes(summary.activation_bytes_per_sample), ")\n");
  return out;
}

Json SummaryJson(const std::string& path, const ModelSummary& summary) {
  Json j;
  j["model"] = path;
  Json nodes = Json::array();
  for (const NodeSummary& n : summary.nodes) {
    Json node;
    node["name"] = n.name;
    node["op"] = n.op;
    Json outputs = Json::array();
    for (const ShapeAndType& s : n.outputs) {
      Json output;
      output["shape"] = s.shape.dims();
      output["dtype"] = DataTypeName(s.dtype);
      outputs.push_back(std::move(output));
    }
    node["outputs"] = std::move(outputs);
    node["parameters"] = n.parameters;
    node["state"] = n.state;
    node["flops_per_sample"] = n.flops_per_sample;
    node["activation_bytes_per_sample"] = n.activation_bytes_per_sample;
    nodes.push_back(std::move(node));
  }
  j["nodes"] = std::move(nodes);
  Json totals;
  totals["trainable_parameters"] = summary.trainable_parameters;
  totals["state_elements"] = summary.state_elements;
  totals["parameter_bytes"] = summary.parameter_bytes;
  totals["flops_per_sample"] = summary.flops_per_sample;
  totals["flops_include_backward"] = summary.has_gradients;
  totals["activation_bytes_per_sample"] = summary.activation_bytes_per_sample;
  j["totals"] = std::move(totals);
  return j;
}

// A per-rank plan file: every rank's graph loads and the graphs fit together;
// then what each rank holds and moves.
int CheckPerRankPlan(const std::string& path, const PlanDef& plan, const std::string& json_path,
                     const std::string& dot_path) {
  if (!dot_path.empty()) {
    std::fprintf(stderr, "error: --dot draws one graph; %s holds one per rank\n", path.c_str());
    return kExitUsage;
  }
  absl::StatusOr<std::vector<std::unique_ptr<Graph>>> parts = LoadRankGraphs(plan, path);
  if (!parts.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parts.status().message()).c_str());
    return kExitFailure;
  }
  if (!json_path.empty()) {
    Json j;
    j["model"] = path;
    Json ranks = Json::array();
    for (size_t r = 0; r < parts->size(); ++r) {
      ranks.push_back(SummaryJson(absl::StrCat(path, " rank ", r), SummarizeModel(*(*parts)[r])));
    }
    j["ranks"] = std::move(ranks);
    if (int exit = EmitJson(json_path, JsonLine(j)); exit != kExitOk || json_path == "-") return exit;
  }
  std::printf("%s: one graph per rank, %zu ranks%s\n", path.c_str(), parts->size(),
              plan.config().passes().empty() ? "" : absl::StrCat(" (passes ", plan.config().passes(), ")").c_str());
  std::printf("ranks:                 %zu checked: each graph loads, Sends meet Recvs, groups agree\n",
              parts->size());
  std::fputs(RankPartsTable(*parts).c_str(), stdout);
  return kExitOk;
}

int RunCheck(const std::vector<std::string>& args) {
  Flags flags = CheckFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(parsed.message()).c_str());
    return kExitUsage;
  }
  const std::string json_path = flags.String("json");
  const bool json = json_path == "-";  // JSON instead of the table
  const std::string dot_path = flags.String("dot");
  if (flags.positional().size() > 1) {
    std::fprintf(stderr, "error: one model at a time (got '%s' and '%s')\n", flags.positional()[0].c_str(),
                 flags.positional()[1].c_str());
    return kExitUsage;
  }
  const std::string model = flags.positional().empty() ? "" : flags.positional()[0];
  if (model.empty()) {
    std::fprintf(stderr, "error: no model given (see nereid check --help)\n");
    return kExitUsage;
  }
  absl::StatusOr<std::optional<PlanDef>> per_rank = ReadPlanFile(model);
  if (!per_rank.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(per_rank.status().message()).c_str());
    return kExitFailure;
  }
  if (per_rank->has_value()) return CheckPerRankPlan(model, **per_rank, json_path, dot_path);
  std::optional<PlanRequest> request;
  if (flags.Has("passes") || flags.Has("workers") || flags.Has("servers")) {
    absl::StatusOr<PlanRequest> asked = CheckPlanRequest(flags, model);
    if (!asked.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(asked.status().message()).c_str());
      return kExitUsage;
    }
    request = *std::move(asked);
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = LoadForCheck(model, request);
  if (!graph.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(graph.status().message()).c_str());
    return kExitFailure;
  }
  // A plan for N workers: each rank's part and the parts together.
  const int64_t workers = (*graph)->header().records().workers();
  std::vector<std::unique_ptr<Graph>> parts;
  if (workers > 0) {
    absl::StatusOr<std::vector<std::unique_ptr<Graph>>> split =
        SplitPlanAcrossRanks(**graph, static_cast<int>(workers));
    if (!split.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", model.c_str(), std::string(split.status().message()).c_str());
      return kExitFailure;
    }
    parts = *std::move(split);
  }
  std::optional<TrainabilityReport> training;
  if (!flags.Has("forward-only") && !HasPlacedNodes(**graph)) {
    absl::StatusOr<TrainabilityReport> trainable = CheckTrainable(**graph, flags.String("dataset"));
    if (!trainable.ok()) {
      std::fprintf(stderr, "error: %s\n(nereid check --forward-only skips this check)\n",
                   std::string(trainable.status().message()).c_str());
      return kExitFailure;
    }
    training = *trainable;
  }
  ModelSummary summary = SummarizeModel(**graph);
  if (!json_path.empty()) {
    if (int exit = EmitJson(json_path, JsonLine(SummaryJson(model, summary))); exit != kExitOk) return exit;
  }
  if (!json) std::fputs(FormatTable(model, summary).c_str(), stdout);
  if (training && !json) {
    std::printf("training:              loss '%s'; fed %s and %s\n", training->loss.c_str(), training->images.c_str(),
                training->labels.c_str());
  }
  if (!dot_path.empty()) {
    absl::Status written = WriteFileAtomically(dot_path, GraphToDot(**graph));
    if (!written.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(written.message()).c_str());
      return kExitFailure;
    }
    if (!json) std::printf("graphviz:              %s\n", dot_path.c_str());
  }
  if (workers > 0 && !json) {
    std::printf("ranks:                 %lld checked: each part loads, Sends meet Recvs, groups agree\n",
                static_cast<long long>(workers));
    if (HasPlacedNodes(**graph) || (*graph)->header().records().group_size() > 0) {
      std::fputs(RankPartsTable(parts).c_str(), stdout);
    }
  }
  return kExitOk;
}

}  // namespace

NEREID_REGISTER_COMMAND(Command{"check", "validate a model; print shapes, parameters, FLOPs, memory", [] { return CheckFlags().Help(); }, RunCheck});

}  // namespace nereid
