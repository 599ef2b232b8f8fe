#include "runtime/cli/rank_parts.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ops/collective_schedule.h"
#include "ops/model_summary.h"
#include "ops/placement_propagation.h"

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

namespace {

// What one rank's part holds and moves, predicted from its shapes.
struct RankFootprint {
  int64_t parameter_bytes = 0;     // trainable
  int64_t state_bytes = 0;         // optimizer state, running statistics
  int64_t comm_bytes_per_step = 0;     // values with no batch dimension (gradients)
  int64_t comm_bytes_per_sample = 0;   // values with one (activations)
  int sends = 0, recvs = 0;
};

RankFootprint FootprintOf(const Graph& part) {
  RankFootprint f;
  const ModelSummary s = SummarizeModel(part);
  for (const NodeSummary& n : s.nodes) {
    if (n.outputs.empty()) continue;
    f.parameter_bytes += n.parameters * DataTypeSize(n.outputs[0].dtype);
  }
  f.state_bytes = s.parameter_bytes - f.parameter_bytes;
  for (const Node* n : part.nodes()) {
    if (IsCutEnd(*n)) {
      f.sends += n->op() == "Send";
      f.recvs += n->op() == "Recv";
    }
    if (!(IsCollective(*n) || (n->op() == "Send" && IsCutEnd(*n)))) continue;
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Node* src = n->input_edge(i)->src;
      const ShapeAndType& v = src->outputs()[n->input_edge(i)->src_port];
      const int64_t bytes = v.shape.KnownElements() * DataTypeSize(v.dtype);
      (v.shape.HasUnknownDim() ? f.comm_bytes_per_sample : f.comm_bytes_per_step) += bytes;
    }
  }
  return f;
}

}  // namespace

std::string RankPartsTable(const std::vector<std::unique_ptr<Graph>>& parts) {
  std::string out =
      "\nrank  nodes      params       state  act/sample   comm/step  comm/sample  sends  recvs\n";
  for (size_t r = 0; r < parts.size(); ++r) {
    const Graph& part = *parts[r];
    const RankFootprint f = FootprintOf(part);
    absl::StrAppend(&out, absl::StrFormat("%-4d  %5d  %10s  %10s  %10s  %10s  %11s  %5d  %5d\n", r, part.num_nodes(),
                                          Bytes(f.parameter_bytes), Bytes(f.state_bytes),
                                          Bytes(SummarizeModel(part).activation_bytes_per_sample),
                                          Bytes(f.comm_bytes_per_step), Bytes(f.comm_bytes_per_sample), f.sends,
                                          f.recvs));
  }
  return out;
}

}  // namespace nereid
