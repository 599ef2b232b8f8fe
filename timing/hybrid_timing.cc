#include "timing/hybrid_timing.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace nereid {

absl::StatusOr<HybridTime> PredictHybrid(const HybridInputs& in) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (in.workers < 2) return bad("workers must be >= 2 (got ", in.workers, ")");
  if (in.group_size < 2 || in.workers % in.group_size != 0) {
    return bad("the model-parallel group (", in.group_size, " ranks) must have >= 2 ranks and divide the ",
               in.workers, " workers");
  }
  if (in.batch_per_worker < 1) return bad("batch per worker must be >= 1");
  if (!(std::isfinite(in.compute_seconds) && in.compute_seconds > 0)) return bad("compute time must be > 0");
  if (in.replicated_gradient_bytes < 0 || in.sharded_gradient_bytes < 0) return bad("gradient bytes must be >= 0");
  if (!(in.link.beta_bytes_per_second > 0) || !(in.link.alpha_seconds >= 0)) {
    return bad("the link needs latency >= 0 and bandwidth > 0");
  }
  const double n = in.workers, g = in.group_size, b = static_cast<double>(in.batch_per_worker);
  const double all = static_cast<double>(in.replicated_gradient_bytes + in.sharded_gradient_bytes);
  HybridTime t;
  t.data_parallel_bytes_sent = 2 * (n - 1) / n * all;
  const double dp_comm = RingAllReduceSeconds(in.workers, all, in.link);
  for (const GroupExchange& x : in.exchanges) {
    const double chunk = 4 * (b * static_cast<double>(x.elements_per_sample) + static_cast<double>(x.fixed_elements));
    if (x.kind == GroupExchange::kAllReduce) {
      t.exchange_seconds += RingAllReduceSeconds(in.group_size, chunk, in.link);
      t.hybrid_bytes_sent += 2 * (g - 1) / g * chunk;
      continue;
    }
    t.exchange_seconds += (g - 1) * (in.link.alpha_seconds + chunk / in.link.beta_bytes_per_second);
    if (x.kind == GroupExchange::kReduceScatter) t.exchange_seconds += (g - 1) * chunk * in.link.gamma_seconds_per_byte;
    t.hybrid_bytes_sent += (g - 1) * chunk;
  }
  const double replicated = static_cast<double>(in.replicated_gradient_bytes);
  t.hybrid_allreduce_seconds = replicated > 0 ? RingAllReduceSeconds(in.workers, replicated, in.link) : 0;
  t.hybrid_bytes_sent += 2 * (n - 1) / n * replicated;
  const int replicas = in.workers / in.group_size;
  const double shard = static_cast<double>(in.sharded_gradient_bytes) / g;
  if (replicas > 1 && shard > 0) {
    t.hybrid_allreduce_seconds += RingAllReduceSeconds(replicas, shard, in.link);
    t.hybrid_bytes_sent += 2.0 * (replicas - 1) / replicas * shard;
  }
  t.data_parallel_seconds = in.compute_seconds + dp_comm;
  t.hybrid_seconds = in.compute_seconds + t.exchange_seconds + t.hybrid_allreduce_seconds;
  t.speedup = t.data_parallel_seconds / t.hybrid_seconds;
  t.data_parallel_efficiency = in.compute_seconds / t.data_parallel_seconds;
  t.hybrid_efficiency = in.compute_seconds / t.hybrid_seconds;
  return t;
}

std::optional<HybridInputs> HybridInputsFromPlan(const Graph& plan) {
  const int64_t group_size = plan.header().records().model_parallel();
  if (group_size < 2) return std::nullopt;
  HybridInputs in;
  in.group_size = static_cast<int>(group_size);
  auto per_sample = [](const TensorShape& s) {
    int64_t e = 1;
    for (int i = 1; i < s.rank(); ++i) e *= s.dim(i);
    return e;
  };
  for (Node* n : plan.nodes()) {
    if (n->op() == "Parameter") {
      if (!NodeAttrBool(*n, "trainable", true)) continue;
      const int64_t bytes = n->outputs()[0].shape.KnownElements() * 4;
      if (!NodeAttrString(*n, "shard_group").empty()) {
        in.sharded_gradient_bytes += bytes * NodeAttrInt(*n, "shard_count", 1);
      } else {
        in.replicated_gradient_bytes += bytes;
      }
    } else if (n->op() == "GroupAllGather" || n->op() == "GroupReduceScatter") {
      // Each member's block: the gather's input, the reduce-scatter's output.
      const bool gather = n->op() == "GroupAllGather";
      const TensorShape& block = gather ? n->input_edge(0)->src->outputs()[n->input_edge(0)->src_port].shape
                                        : n->outputs()[0].shape;
      GroupExchange x{gather ? GroupExchange::kAllGather : GroupExchange::kReduceScatter};
      if (block.rank() > 0 && block.dim(0) == kUnknownDim) {
        x.elements_per_sample = per_sample(block);
      } else {
        x.fixed_elements = block.KnownElements();  // a parameter's shards, not activations
      }
      in.exchanges.push_back(x);
    } else if (n->op() == "GroupAllReduce" && n->outputs()[0].shape.rank() > 1 &&
               n->outputs()[0].shape.dim(0) == kUnknownDim) {
      // Per sample (a block's output or its input's gradient), not the
      // clip's one sum of squares.
      in.exchanges.push_back({GroupExchange::kAllReduce, per_sample(n->outputs()[0].shape)});
    }
  }
  return in;
}

absl::StatusOr<HybridTime> PredictHybridAt(HybridInputs in, int workers, double bandwidth_gbit) {
  in.workers = workers;
  in.group_size = workers;
  in.link.beta_bytes_per_second = bandwidth_gbit * 1e9 / 8;
  return PredictHybrid(in);
}

}  // namespace nereid
