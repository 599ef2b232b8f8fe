#ifndef NEREID_PASSES_PASS_MANAGER_H_
#define NEREID_PASSES_PASS_MANAGER_H_

// Parses a pipeline string into an ordered list of configured passes and
// runs it: the graph is validated and its shapes inferred after every pass,
// so a pass that breaks the graph is caught at once ("failed after sgd:
// ..."), and each pass's effect is reported as nodes added and removed.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"
#include "passes/pass.h"

namespace nereid {

struct PipelineStage {
  const PassInfo* pass;
  PassOptions options;
};

// "autodiff,sgd(lr=0.05,momentum=0.9)". Unknown passes and options, values
// of the wrong type and malformed syntax are errors that list what exists.
absl::StatusOr<std::vector<PipelineStage>> ParsePipeline(absl::string_view pipeline);

struct PassReport {
  std::string pass;
  std::string options;  // "lr=0.05, momentum=0.9, ..."
  std::vector<std::string> added;    // node names, in creation order
  std::vector<std::string> removed;
  std::vector<std::string> notes;
  int nodes_after = 0;
};

struct PipelineOptions {
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
