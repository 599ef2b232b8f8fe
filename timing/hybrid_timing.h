#ifndef NEREID_TIMING_HYBRID_TIMING_H_
#define NEREID_TIMING_HYBRID_TIMING_H_

// Predicted iteration time of SplitBrain's hybrid parallelism against data
// parallelism, and their scaling to larger clusters: the alpha-beta model of
// timing/timing_model.h applied to what each strategy sends. Pure functions.
//
// Notation: n workers, model-parallel groups of G ranks (G divides n), B
// samples per worker, a link with latency alpha and bandwidth beta (and
// summing cost gamma), T_c one worker's compute per step (the same under both
// strategies: a sharded pair multiplies G*B rows by 1/G of the weights).
//
//   data parallel:  T_dp  = T_c + T_ring(n, M)
//   hybrid:         T_hyb = T_c + sum over exchanges of T_x + T_ring(n, M_r)
//                           + T_ring(n / G, M_s / G)
// with M all gradient bytes, M_r those of replicated parameters, M_s those of
// the sharded ones (unsharded size; each rank holds M_s / G and averages it
// over the n / G ranks holding the same shard), and an exchange (an
// all-gather or reduce-scatter of the group, forward or backward) of e
// elements per sample costing a ring of G - 1 steps of B*e*4 bytes:
//   T_x = (G - 1) * (alpha + 4 B e / beta)   (+ (G-1)/G * 4 G B e * gamma for
//                                             a reduce-scatter)
// and a tensor-parallel (megatron style) allreduce of the group's one batch,
// a ring of 2 (G - 1) steps of 4 B e / G bytes: T_x = T_ring(G, 4 B e)
// Nothing overlaps in either (conservative for both; the bucketed overlap of
// timing_model.h applies to data parallelism's backward pass and to hybrid's
// replicated part alike). What the model leaves out: the CPU the exchanges
// take on a worker, stragglers, and links shared by ranks of one machine.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/ir.h"
#include "timing/timing_model.h"

namespace nereid {

struct GroupExchange {
  enum Kind { kAllGather, kReduceScatter, kAllReduce };  // an allreduce: tensor parallel's
  Kind kind = kAllGather;
  int64_t elements_per_sample = 0;  // of each rank's own block (an allreduce: of the whole value)
  int64_t fixed_elements = 0;       // the same, whatever the batch (a row layer's bias in shards)
};

struct HybridInputs {
  int workers = 0;     // n >= 2
  int group_size = 0;  // G >= 2, divides n
  int64_t batch_per_worker = 0;
  double compute_seconds = 0;
  int64_t replicated_gradient_bytes = 0;  // M_r
  int64_t sharded_gradient_bytes = 0;     // M_s, unsharded
  std::vector<GroupExchange> exchanges;   // one step's, forward and backward
  LinkModel link;
};

struct HybridTime {
  double data_parallel_seconds = 0;
  double hybrid_seconds = 0;
  double exchange_seconds = 0;         // hybrid's group exchanges
  double hybrid_allreduce_seconds = 0; // hybrid's gradient averaging
  double data_parallel_bytes_sent = 0; // per worker and step
  double hybrid_bytes_sent = 0;
  double speedup = 0;                  // T_dp / T_hyb
  // Samples per second over n times one worker's (T_c / T).
  double data_parallel_efficiency = 0;
  double hybrid_efficiency = 0;
};

// From a hybrid plan (graph attribute model_parallel > 1): the group size, the
// replicated and sharded gradient bytes and the exchanges of group "model";
// workers, batch, compute and link are left for the caller. nullopt for a
// plan that is not hybrid.
std::optional<HybridInputs> HybridInputsFromPlan(const Graph& plan);

// InvalidArgument names what is out of range.
absl::StatusOr<HybridTime> PredictHybrid(const HybridInputs& in);

// The same inputs at `workers` workers in one group of all of them (the
// exchanges' per-sample sizes do not depend on n), at `bandwidth_gbit`.
absl::StatusOr<HybridTime> PredictHybridAt(HybridInputs in, int workers, double bandwidth_gbit);

}  // namespace nereid

#endif  // NEREID_TIMING_HYBRID_TIMING_H_
