#include "runtime/cli/rank_parts.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ops/model_summary.h"
#include "ops/placement_plan.h"

namespace nereid {

std::string Bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// A rank whose part does not load is left out: CheckPlanAcrossRanks names it.
std::string RankPartsTable(const Graph& plan, int workers) {
  std::string out = "\nrank  nodes  params+state  act/sample  sends  recvs\n";
  for (int r = 0; r < workers; ++r) {
    absl::StatusOr<std::unique_ptr<Graph>> part = ProjectForRank(plan, r, workers);
    if (!part.ok()) continue;  // CheckPlanAcrossRanks reported it
    ModelSummary s = SummarizeModel(**part);
    int sends = 0, recvs = 0;
    for (const Node* n : (*part)->nodes()) {
      if (!IsCutEnd(*n)) continue;
      sends += n->op() == "Send";
      recvs += n->op() == "Recv";
    }
    absl::StrAppend(&out, absl::StrFormat("%-4d  %5d  %12s  %10s  %5d  %5d\n", r, (*part)->num_nodes(),
                                          Bytes(s.parameter_bytes), Bytes(s.activation_bytes_per_sample), sends,
                                          recvs));
  }
  return out;
}

}  // namespace nereid
