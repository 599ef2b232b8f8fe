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

std::string RankPartsTable(const std::vector<std::unique_ptr<Graph>>& parts) {
  std::string out = "\nrank  nodes  params+state  act/sample  sends  recvs\n";
  for (size_t r = 0; r < parts.size(); ++r) {
    const Graph& part = *parts[r];
    ModelSummary s = SummarizeModel(part);
    int sends = 0, recvs = 0;
    for (const Node* n : part.nodes()) {
      if (!IsCutEnd(*n)) continue;
      sends += n->op() == "Send";
      recvs += n->op() == "Recv";
    }
    absl::StrAppend(&out, absl::StrFormat("%-4d  %5d  %12s  %10s  %5d  %5d\n", r, part.num_nodes(),
                                          Bytes(s.parameter_bytes), Bytes(s.activation_bytes_per_sample), sends,
                                          recvs));
  }
  return out;
}

}  // namespace nereid
