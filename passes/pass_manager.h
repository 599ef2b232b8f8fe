#ifndef NEREID_PASSES_PASS_MANAGER_H_
#define NEREID_PASSES_PASS_MANAGER_H_

// Parses a pipeline string into an ordered list of configured passes and
// runs it: the graph is validated and its shapes inferred after every pass,
// so a pass that breaks the graph is caught at once ("failed after sgd:
// ..."), and each pass's effect is reported as nodes added and removed.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"
#include "passes/pass.h"

namespace nereid {

struct PipelineStage {
  const PassInfo* pass;
  PassOptions options;
  std::string text;  // the stage as written ("sgd(lr=0.05)"); the name for an implied one
};

// "autodiff,sgd(lr=0.05,momentum=0.9)". Unknown passes and options, values
// of the wrong type, malformed syntax and an order that breaks what the
// passes declare (CheckPipelineOrder) are errors that list what exists.
absl::StatusOr<std::vector<PipelineStage>> ParsePipeline(absl::string_view pipeline);

// Every stage's `needs` provided by an earlier stage when some stage provides
// it at all, no `precedes` provided earlier (or, given `graph`, true of the
// graph already), and a `runs_last` pass last (given `graph`, a graph it
// placed takes no pass). The error names both passes.
absl::Status CheckPipelineOrder(const std::vector<PipelineStage>& pipeline, const Graph* graph = nullptr);

// Adds the passes `target` implies (PassInfo::implied_for), each right after
// the first stage by which all it needs is provided; none when no stage
// provides what it needs (a graph planned already) or one provides what it
// provides. Then checks the order.
absl::Status AddImpliedPasses(std::vector<PipelineStage>& pipeline, const PlanTarget& target);

// The stages' texts joined by commas: the pipeline as written, with the
// implied passes where they were added.
std::string PipelineText(const std::vector<PipelineStage>& pipeline);

struct PassReport {
  std::string pass;
  std::string options;  // "lr=0.05, momentum=0.9, ..."
  std::vector<std::string> added;    // node names, in creation order
  std::vector<std::string> removed;
  std::vector<std::string> notes;
  int nodes_after = 0;
};

struct PipelineOptions {
  // What the plan is for; unset: the workers the graph's plan records
  // (a graph planned before), else not known.
  std::optional<PlanTarget> target;
  // Pass names after which to write the graph; `dump` is called with the
  // pass name and the graph.
  std::vector<std::string> dump_after;
  std::function<absl::Status(const std::string& pass, const Graph& graph)> dump;
};

absl::StatusOr<std::vector<PassReport>> RunPipeline(Graph& graph, const std::vector<PipelineStage>& pipeline,
                                                    const PipelineOptions& options = {});

// A summary of one report for the terminal: "autodiff: +42 nodes (...)".
std::string FormatReport(const PassReport& report);

}  // namespace nereid

#endif  // NEREID_PASSES_PASS_MANAGER_H_
