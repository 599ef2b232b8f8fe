#include "ops/live_set.h"

#include <algorithm>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor_shape.h"

namespace nereid {
namespace {

int64_t RoundUp(int64_t bytes, int64_t granularity) {
  if (granularity <= 1) return bytes;
  return std::max<int64_t>(1, (bytes + granularity - 1) / granularity) * granularity;
}

}  // namespace

absl::StatusOr<LiveSet> PredictStepLiveSet(const Graph& graph, int64_t batch, int64_t granularity,
                                           const std::function<bool(const Node&)>& counted) {
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("batch must be at least 1, not ", batch));
  int max_id = 0;
  for (const Node* n : graph.nodes()) max_id = std::max(max_id, n->id() + 1);
  std::vector<const Node*> by_id(max_id, nullptr);
  std::vector<int64_t> bytes(max_id, 0);   // a node's outputs, as allocated
  std::vector<int> pending(max_id, 0);     // in-step inputs not yet run
  std::vector<int> uses_left(max_id, 0);   // data consumers not yet run
  std::vector<bool> retained(max_id, false);  // carried into the next step by a Feedback
  LiveSet live;
  for (const Node* n : graph.nodes()) {
    by_id[n->id()] = n;
    if (!counted(*n)) continue;
    for (const ShapeAndType& out : n->outputs()) {
      int64_t elements = 1;
      for (int64_t d : out.shape.dims()) elements *= d < 0 ? batch : d;
      bytes[n->id()] += RoundUp(elements * DataTypeSize(out.dtype), granularity);
    }
    if (n->op() == "Parameter") live.state_bytes += bytes[n->id()];
  }
  for (const Node* n : graph.nodes()) {
    if (n->op() == "Feedback") {
      // Its value is the input's buffer, kept for the next step.
      for (int i = 0; i < n->num_inputs(); ++i) retained[n->input_edge(i)->src->id()] = true;
      continue;  // its edge to the Parameter is not within the step
    }
    for (const Edge* e : n->out_edges()) {
      ++pending[e->dst->id()];
      if (!e->IsControl()) ++uses_left[n->id()];
    }
  }
  std::deque<int> ready;
  for (const Node* n : by_id) {
    if (n != nullptr && pending[n->id()] == 0) ready.push_back(n->id());
  }
  int64_t now = live.state_bytes;
  live.peak_bytes = now;
  size_t ran = 0;
  auto release = [&](int id) {
    if (by_id[id]->op() != "Parameter" && by_id[id]->op() != "Feedback" && !retained[id]) now -= bytes[id];
  };
  while (!ready.empty()) {
    const int id = ready.front();
    ready.pop_front();
    const Node& n = *by_id[id];
    ++ran;
    if (n.op() != "Parameter" && n.op() != "Feedback") {
      now += bytes[id];
      if (now > live.peak_bytes) {
        live.peak_bytes = now;
        live.peak_after = n.name();
      }
    }
    if (n.op() != "Parameter") {
      for (int i = 0; i < n.num_inputs(); ++i) {
        const int src = n.input_edge(i)->src->id();
        if (--uses_left[src] == 0) release(src);
      }
    }
    if (uses_left[id] == 0) release(id);
    if (n.op() == "Feedback") continue;
    for (const Edge* e : n.out_edges()) {
      if (e->dst->op() != "Parameter" && --pending[e->dst->id()] == 0) ready.push_back(e->dst->id());
    }
  }
  if (ran != graph.nodes().size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the step's nodes form a cycle: ", graph.nodes().size() - ran, " never became ready"));
  }
  return live;
}

}  // namespace nereid
